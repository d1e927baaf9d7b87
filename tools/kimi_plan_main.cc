// The kimi-plan executable: the light commands (no LibTorch); the commands
// that train are handed to kimi-plan-runtime beside it by execv. The only
// place that replaces or exits the process.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>

#include "cli/cli.h"
#include "cli/program.h"

int main(int argc, char** argv) {
  kp::RealServices services;
  kp::CliEnv env = kp::RealCliEnv(services, argv[0]);
  env.runtime_program = kp::SiblingExecutable(kp::kRuntimeProgram);
  env.exec = [](const std::string& program, const std::vector<std::string>& args) {
    std::vector<char*> argv_out;
    argv_out.push_back(const_cast<char*>(program.c_str()));
    for (const std::string& a : args) argv_out.push_back(const_cast<char*>(a.c_str()));
    argv_out.push_back(nullptr);
    std::cout.flush();
    ::execv(program.c_str(), argv_out.data());
    return kp::Status::IoError("cannot start " + program + ": " + std::strerror(errno));
  };
  return kp::RunCli(std::vector<std::string>(argv + 1, argv + argc), env);
}
