// Output flags checked before any work: a command that writes files (--out,
// --csv, --html, --checkpoint-dir, --save-adapters) refuses a path it could
// not write before it computes, records or writes anything, so that a bad
// path never leaves a store row without its files.
#ifndef KIMI_PLAN_CLI_OUTPUT_PATHS_H_
#define KIMI_PLAN_CLI_OUTPUT_PATHS_H_

#include <initializer_list>

#include "cli/cli.h"
#include "cli/options.h"
#include "common/status.h"

namespace kp {

/// When `flag` is given: its value names a file that can be written
/// (FileSystem::CheckWritableFile; `create_parent` when the command creates
/// the file's directory). InvalidArgument "--FLAG: PATH ..." otherwise.
Status CheckOutputFile(const po::variables_map& vm, const CliEnv& env, const char* flag, bool create_parent);

/// When `flag` is given: its value names a directory that exists and is
/// writable or can be created. InvalidArgument "--FLAG: PATH ..." otherwise.
Status CheckOutputDirectory(const po::variables_map& vm, const CliEnv& env, const char* flag);

/// Of the `flags` given, no two name the same file (compared by
/// FileSystem::Canonical): one output would silently replace the other, or
/// an output the store (--db) or an input. InvalidArgument "--B: PATH is
/// also --A's path; give each its own file" otherwise.
Status CheckDistinctPaths(const po::variables_map& vm, const CliEnv& env, std::initializer_list<const char*> flags);

}  // namespace kp

#endif  // KIMI_PLAN_CLI_OUTPUT_PATHS_H_
