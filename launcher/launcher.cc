#include "launcher/launcher.h"

#include "launcher/modal_app.h"
#include "launcher/slurm_script.h"

namespace kp {

Result<LaunchArtifacts> BuildLaunch(const Launch& l, const VerlKeys& keys, const std::string& out_dir,
                                    const std::string& program) {
  KP_RETURN_IF_ERROR(CheckLaunch(l));
  LaunchArtifacts a;
  switch (l.options.target) {
    case LaunchTarget::kSlurm: {
      KP_ASSIGN_OR_RETURN(std::string script, SlurmScript(l, keys));
      a.files.push_back({out_dir + "/" + kSlurmScriptName, std::move(script)});
      a.start_command = {"sbatch", a.files.back().path};
      break;
    }
    case LaunchTarget::kModal: {
      KP_ASSIGN_OR_RETURN(std::string app, ModalApp(l, keys, program));
      a.files.push_back({out_dir + "/" + kModalAppName, std::move(app)});
      a.start_command = {"modal", "run", "--detach", a.files.back().path};
      break;
    }
    case LaunchTarget::kLocal: {
      a.start_command = {program};
      for (std::string& arg : NativeRunArgs(l, l.request.world())) a.start_command.push_back(std::move(arg));
      break;
    }
  }
  return a;
}

std::string JobLabel(const std::string& label) {
  std::string out = label.empty() ? "custom" : label;
  for (char& c : out) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                    c == '_' || c == '.';
    if (!ok) c = '-';
  }
  return out;
}

}  // namespace kp
