// `kimi-plan checkpoint inspect PATH`: the tensors of a safetensors file or
// of a Hugging Face checkpoint folder (model.safetensors, or the shards its
// model.safetensors.index.json names): name, dtype, shape, bytes, the
// file holding each and the runtime tensor it loads into (weights/hf_names.h;
// "-" for a name the Kimi K2 / DeepSeek-V3 table lacks), after every check
// of weights/safetensors.h and weights/checkpoint_dir.h. Nothing is read but
// the headers and the index.
// `kimi-plan checkpoint export SAVE --out DIR`: a layout-free save of `run`
// or `train --save` (weights/sharded_save.h) assembled into a servable
// Hugging Face folder, one tensor at a time, one shard in memory at most
// (weights/hf_export.h): an INT4 base as released INT4, LoRA adapters folded
// into their weights with --merge-lora, else left out and counted.
#include <filesystem>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/options.h"
#include "common/table.h"
#include "specs/hf_config.h"
#include "specs/presets.h"
#include "weights/checkpoint_dir.h"
#include "weights/hf_export.h"
#include "weights/hf_names.h"
#include "weights/sharded_save.h"

namespace kp {

namespace {

using nlohmann::json;

po::options_description CheckpointOptions() {
  po::options_description desc(
      "kimi-plan checkpoint inspect PATH [--json]\n"
      "kimi-plan checkpoint export SAVE --out DIR [--dtype bf16|saved] [--max-shard-gib G] [--merge-lora] [--json]\n\n"
      "inspect lists the tensors of a safetensors file or a Hugging Face checkpoint folder (its index and\n"
      "shards), checking the format: a truncated file, a header that lies about offsets, a missing shard or an\n"
      "index naming a tensor no file holds is one line naming the file and tensor, exit 2.\n"
      "export writes the weights of a save of `run` / `train --save` (any layout; its latest complete step,\n"
      "or the step folder named) as a Hugging Face folder under the released names; a LoRA run's adapters are\n"
      "folded into the weights they adapt with --merge-lora (an INT4 base then written in bf16), else left out.\n"
      "Options");
  desc.add_options()("help,h", "this text")
      ("action", po::value<std::string>(), "inspect | export (positional)")
      ("path", po::value<std::string>(), "inspect: a .safetensors file or a checkpoint folder; export: a save (positional)")
      ("out", po::value<std::string>(), "export: the folder to write")
      ("dtype", po::value<std::string>()->default_value("bf16"), "export: bf16 (fp32 rounded to nearest even) | saved")
      ("max-shard-gib", NumberFlag(1.0 / 1024, 1024)->default_value(5.0), "export: the largest shard file, GiB")
      ("merge-lora", "export: fold the save's LoRA adapters into the weights (W + alpha / rank B A)")
      ("json", "the tensors (inspect) or what was written (export) as JSON");
  return desc;
}

// "layers.1.moe.experts.gate[3] (INT4 scale)", or "" for an unknown name.
std::string RuntimeText(const std::string& hf_name) {
  const Result<RuntimeTarget> t = RuntimeTargetOf(hf_name);
  if (!t.ok()) return "";
  static const char* const kForm[] = {"", " (INT4 packed)", " (INT4 scale)", " (INT4 shape)"};
  return t->name + (t->expert >= 0 ? "[" + std::to_string(t->expert) + "]" : "") + kForm[static_cast<int>(t->form)];
}

struct Row {
  std::string name, file;
  const TensorEntry* entry;
};

Status Print(const std::vector<Row>& rows, bool as_json, std::ostream& out) {
  std::uint64_t total = 0;
  for (const Row& r : rows) total += r.entry->end - r.entry->begin;
  if (as_json) {
    json tensors = json::array();
    for (const Row& r : rows)
    {
      const std::string runtime = RuntimeText(r.name);
      tensors.push_back({{"name", r.name}, {"dtype", std::string(DTypeName(r.entry->dtype))},
                         {"shape", r.entry->shape}, {"bytes", r.entry->end - r.entry->begin}, {"file", r.file},
                         {"runtime", runtime.empty() ? json(nullptr) : json(runtime)}});
    }
    out << json{{"tensors", tensors}, {"total_bytes", total}}.dump(2) << "\n";
    return Status::Ok();
  }
  Table t({"tensor", "dtype", "shape", "bytes", "file", "runtime tensor"});
  for (const Row& r : rows) {
    const std::string runtime = RuntimeText(r.name);
    t.AddRow({r.name, std::string(DTypeName(r.entry->dtype)), ShapeText(r.entry->shape),
              std::to_string(r.entry->end - r.entry->begin), r.file, runtime.empty() ? "-" : runtime});
  }
  out << t.Render() << rows.size() << " tensors, " << total << " bytes\n";
  return Status::Ok();
}

Status Export(const po::variables_map& vm, CliEnv& env) {
  if (!vm.count("path")) return Status::InvalidArgument("SAVE: give the save folder of run / train --save");
  if (!vm.count("out")) return Status::InvalidArgument("--out: give the folder to write the Hugging Face checkpoint to");
  const std::string dtype = vm["dtype"].as<std::string>(), out = vm["out"].as<std::string>();
  if (dtype != "bf16" && dtype != "saved")
    return Status::InvalidArgument("--dtype: must be bf16 or saved, got \"" + dtype + "\"");
  KP_RETURN_IF_ERROR(env.fs.CheckWritableDirectory(out).WithContext("--out"));
  if (env.fs.Exists(out + "/model.safetensors") || env.fs.Exists(out + "/model.safetensors.index.json"))
    return Status::InvalidArgument("--out: " + out + " already holds a checkpoint (choose an empty folder)");
  KP_ASSIGN_OR_RETURN(const ShardedSave save, ShardedSave::Open(env.fs, vm["path"].as<std::string>()));
  const auto max_bytes = static_cast<std::int64_t>(vm["max-shard-gib"].as<double>() * (1ull << 30));
  // Made before any tensor is written, so that a model the config cannot
  // describe (K3's KDA and AttnRes) is known before and the folder gets
  // weights only: serving engines cannot run those anyway.
  Result<ModelSpec> model = Status::NotFound("the save records no model (made before saves did)");
  if (!save.manifest().model.empty()) {
    KP_ASSIGN_OR_RETURN(model, ParseModelSpec(save.manifest().model));
  }
  const std::string torch_dtype = dtype == "bf16" ? "bfloat16" : "float32";
  Result<std::string> config = model.ok() ? HfConfigFromModelSpec(*model, torch_dtype) : model.status();
  ExportOptions options;
  options.bf16 = dtype == "bf16";
  options.max_shard_bytes = max_bytes;
  options.merge_lora = vm.count("merge-lora") > 0;
  KP_ASSIGN_OR_RETURN(const ExportSummary summary, ExportHfFolder(save, env.fs, out, options));
  if (config.ok() && summary.int4_experts) config = HfConfigFromModelSpec(*model, torch_dtype, /*int4_experts=*/true);
  if (config.ok()) KP_RETURN_IF_ERROR(env.fs.WriteFile(out + "/config.json", *config).WithContext("--out"));
  KP_ASSIGN_OR_RETURN(const CheckpointDir dir, CheckpointDir::Open(env.fs, out));
  std::uint64_t bytes = 0;
  for (const SafetensorsFile& f : dir.files())
    for (const TensorEntry& e : f.tensors()) bytes += e.end - e.begin;
  const std::string adapters = summary.adapters == 0 ? "none"
                               : summary.merged > 0  ? std::to_string(summary.adapters) + " folded into " +
                                                          std::to_string(summary.merged) + " weights"
                                                     : std::to_string(summary.adapters) +
                                                          " left out (--merge-lora folds them in)";
  if (vm.count("json")) {
    env.out << json{{"save", save.folder()}, {"step", save.manifest().step}, {"layout", save.manifest().layout},
                    {"out", out}, {"tensors", summary.tensors}, {"files", dir.files().size()}, {"bytes", bytes},
                    {"adapters", summary.adapters}, {"merged", summary.merged}, {"int4_experts", summary.int4_experts},
                    {"config", config.ok() ? json(out + "/config.json") : json(config.status().message())}}
                   .dump(2)
            << "\n";
    return Status::Ok();
  }
  Table t({"save", "step", "saved on", "tensors", "files", "bytes", "written to"});
  t.AddRow({save.folder(), std::to_string(save.manifest().step), save.manifest().layout, std::to_string(summary.tensors),
            std::to_string(dir.files().size()), std::to_string(bytes), out});
  env.out << t.Render() << "LoRA adapters: " << adapters << (summary.int4_experts ? "; INT4 experts as saved" : "")
          << "\n"
          << (config.ok() ? "config.json: DeepseekV3ForCausalLM\n" : "no config.json: " + config.status().message() + "\n");
  return Status::Ok();
}

}  // namespace

Status CheckpointCommand(const std::vector<std::string>& args, CliEnv& env) {
  const po::options_description desc = CheckpointOptions();
  po::positional_options_description positional;
  positional.add("action", 1).add("path", 1);
  po::variables_map vm;
  KP_ASSIGN_OR_RETURN(const bool proceed, ParseCommand(args, desc, &vm, env.out, &positional));
  if (!proceed) return Status::Ok();
  const std::string action = vm.count("action") ? vm["action"].as<std::string>() : std::string();
  if (action == "export") return Export(vm, env);
  if (action != "inspect")
    return Status::InvalidArgument("checkpoint: the action must be inspect or export, got \"" + action + "\"");
  if (!vm.count("path")) return Status::InvalidArgument("PATH: give a .safetensors file or a checkpoint folder");
  const std::string path = vm["path"].as<std::string>();
  std::vector<Row> rows;
  if (std::filesystem::is_directory(path)) {
    KP_ASSIGN_OR_RETURN(const CheckpointDir dir, CheckpointDir::Open(env.fs, path));
    for (const auto& [name, where] : dir.tensors())
      rows.push_back({name, std::filesystem::path(where.first->path()).filename().string(), where.second});
    return Print(rows, vm.count("json") > 0, env.out);
  }
  KP_ASSIGN_OR_RETURN(const SafetensorsFile file, SafetensorsFile::Open(path));
  for (const TensorEntry& e : file.tensors()) rows.push_back({e.name, std::filesystem::path(path).filename().string(), &e});
  return Print(rows, vm.count("json") > 0, env.out);
}

}  // namespace kp
