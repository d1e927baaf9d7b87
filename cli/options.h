// Option parsing shared by the subcommands: Boost.Program_options with its
// exceptions turned into one-line InvalidArgument statuses, and the options
// that name a model, a GPU and a cluster.
#ifndef KIMI_PLAN_CLI_OPTIONS_H_
#define KIMI_PLAN_CLI_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "cli/cli.h"
#include "common/status.h"
#include "specs/gpu_spec.h"
#include "specs/model_spec.h"

namespace kp {

namespace po = boost::program_options;

/// Parses `args` against `desc`. On --help prints `desc` to `out` and
/// returns false: the command has nothing more to do. A word that is no
/// flag's value is an error, unless `positional` names a flag for it.
Result<bool> ParseCommand(const std::vector<std::string>& args, const po::options_description& desc,
                          po::variables_map* vm, std::ostream& out,
                          const po::positional_options_description* positional = nullptr);

/// An integer flag that accepts only min..max (common/limits.h states the
/// bounds). The value is parsed as a 64-bit integer and checked while the
/// command line is read (ParseCommand), so a value that is not an integer or
/// is out of range is refused with one line naming the flag and the range
/// before the command does anything; the option's type stays `int` (or
/// std::int64_t for Int64Flag), so `vm[name].as<int>()` reads it. Every
/// integer flag of every command is declared with one of these.
po::typed_value<int>* IntFlag(std::int64_t min, std::int64_t max);
po::typed_value<std::int64_t>* Int64Flag(std::int64_t min, std::int64_t max);
/// A seed: an integer from 0 to 2^63 - 1 read as Int64Flag reads, stored as
/// the std::uint64_t the runtime takes ("-1" is refused, not wrapped).
po::typed_value<std::uint64_t>* SeedFlag();

/// A floating-point flag that accepts only finite values within [min, max]
/// ((min, max] when `min_open`): "inf", "nan" and values beyond a double are
/// refused as not finite, with one line naming the flag. Every floating-point
/// flag of every command is declared with this.
po::typed_value<double>* NumberFlag(double min, double max, bool min_open = false);

/// --model, --model-file and the dense-GPT flags (--hidden --ffn-hidden
/// --heads --head-dim --layers --vocab).
void AddModelOptions(po::options_description& desc);
/// The model the options name; `fallback` is the preset to use when none is
/// named (empty: one must be), `fallback_field` where it came from (a
/// topology's "model"), which an error names.
Result<ModelSpec> ResolveModel(const po::variables_map& vm, const CliEnv& env, const std::string& fallback,
                               const std::string& fallback_field = "--model");

/// --gpu and --gpu-file.
void AddGpuOptions(po::options_description& desc);
Result<GpuSpec> ResolveGpu(const po::variables_map& vm, const CliEnv& env, const std::string& fallback,
                           const std::string& fallback_field = "--gpu");

/// --json and --db.
void AddOutputOptions(po::options_description& desc);

/// Ok unless `flag` was given on the command line (not defaulted) while
/// `holds` is false: then FlagNeedsSetting's InvalidArgument (common/
/// flag_values.h): a flag that would do nothing is refused rather than
/// silently ignored.
Status FlagNeeds(const po::variables_map& vm, const char* flag, bool holds, const std::string& what);

/// The first of `desc`'s flags but `except` given on the command line (not
/// defaulted), as "--name"; empty when none was: for refusing a group of
/// flags that a mode of a command does not read.
std::string FirstGivenFlag(const po::variables_map& vm, const po::options_description& desc,
                           const std::vector<std::string>& except = {});

/// Reads an "on"/"off" flag value (ParseOnOff); `fallback` when not given.
Result<bool> OnOff(const po::variables_map& vm, const char* name, bool fallback);

}  // namespace kp

#endif  // KIMI_PLAN_CLI_OPTIONS_H_
