#include "cli/options.h"

#include <algorithm>
#include <sstream>

#include "common/flag_values.h"
#include "common/limits.h"
#include "common/range.h"
#include "common/text.h"
#include "specs/presets.h"

namespace kp {

namespace {

// Boost puts the flag's name where the template says %canonical_option%
// ("--nodes") when the error leaves the parser.
[[noreturn]] void ThrowFlagError(const Status& s) {
  throw po::error_with_option_name("%canonical_option%" + s.message());
}

// A typed value whose parse checks the range: the status's name is left
// empty and Boost supplies the flag.
template <typename T>
class RangedInt : public po::typed_value<T> {
 public:
  RangedInt(std::int64_t min, std::int64_t max) : po::typed_value<T>(nullptr), min_(min), max_(max) {}
  void xparse(boost::any& store, const std::vector<std::string>& tokens) const override {
    po::validators::check_first_occurrence(store);
    Result<std::int64_t> v = ParseIntInRange("", po::validators::get_single_string(tokens), min_, max_);
    if (!v.ok()) ThrowFlagError(v.status());
    store = boost::any(static_cast<T>(*v));
  }

 private:
  std::int64_t min_, max_;
};

class RangedNumber : public po::typed_value<double> {
 public:
  RangedNumber(double min, double max, bool min_open)
      : po::typed_value<double>(nullptr), min_(min), max_(max), min_open_(min_open) {}
  void xparse(boost::any& store, const std::vector<std::string>& tokens) const override {
    po::validators::check_first_occurrence(store);
    Result<double> v = ParseNumberInRange("", po::validators::get_single_string(tokens), min_, max_, min_open_);
    if (!v.ok()) ThrowFlagError(v.status());
    store = boost::any(*v);
  }

 private:
  double min_, max_;
  bool min_open_;
};

// The first word beyond the positional ones `positional` takes: Boost's
// error does not say which.
std::string FirstExtraPositional(const std::vector<std::string>& args, const po::options_description& desc,
                                 const po::positional_options_description& positional) {
  po::options_description with_extra;
  with_extra.add(desc).add_options()("kp-extra-words", po::value<std::vector<std::string>>());
  po::positional_options_description taken = positional;
  taken.add("kp-extra-words", -1);
  try {
    for (const po::option& o : po::command_line_parser(args).options(with_extra).positional(taken).run().options)
      if (o.string_key == "kp-extra-words" && !o.value.empty()) return o.value.front();
  } catch (const po::error&) {
  }
  return "";
}

}  // namespace

po::typed_value<int>* IntFlag(std::int64_t min, std::int64_t max) { return new RangedInt<int>(min, max); }
po::typed_value<std::int64_t>* Int64Flag(std::int64_t min, std::int64_t max) {
  return new RangedInt<std::int64_t>(min, max);
}
po::typed_value<std::uint64_t>* SeedFlag() { return new RangedInt<std::uint64_t>(0, INT64_MAX); }
po::typed_value<double>* NumberFlag(double min, double max, bool min_open) {
  return new RangedNumber(min, max, min_open);
}

Result<bool> ParseCommand(const std::vector<std::string>& args, const po::options_description& desc,
                          po::variables_map* vm, std::ostream& out,
                          const po::positional_options_description* positional) {
  try {
    po::command_line_parser parser(args);
    parser.options(desc);
    if (positional) parser.positional(*positional);
    const po::parsed_options parsed = parser.run();
    // Boost drops a word that belongs to no flag (`--nodes 4 8`: the 8);
    // no command takes one here, so it is an error, not silence.
    for (const po::option& o : parsed.options) {
      if (o.string_key.empty())
        return Status::InvalidArgument("unexpected argument \"" +
                                       QuoteBounded(o.original_tokens.empty() ? "" : o.original_tokens.front()) +
                                       "\": every value follows its --flag (see --help)");
      // No value a flag takes (a name, a path, a list) holds a control
      // byte; one that did could end a line of a generated job script.
      for (const std::string& v : o.value) {
        // An empty value would mean "not given" to most flags and something
        // else to some: it is refused for all.
        if (v.empty()) return Status::InvalidArgument("--" + o.string_key + ": the value is empty");
        if (std::any_of(v.begin(), v.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; }))
          return Status::InvalidArgument("--" + o.string_key + ": must not contain control characters, got \"" +
                                         QuoteBounded(v) + "\"");
        if (v.size() > kMaxTextFieldBytes)
          return Status::InvalidArgument("--" + o.string_key + ": must be at most " +
                                         std::to_string(kMaxTextFieldBytes) + " bytes, got " +
                                         std::to_string(v.size()));
      }
    }
    po::store(parsed, *vm);
    po::notify(*vm);
  } catch (const po::too_many_positional_options_error&) {
    return Status::InvalidArgument("unexpected argument \"" + QuoteBounded(FirstExtraPositional(args, desc, *positional)) +
                                   "\": every value follows its --flag (see --help)");
  } catch (const po::error& e) {
    return Status::InvalidArgument(e.what());
  }
  if (!vm->count("help")) return true;
  out << desc << "\n";
  return false;
}

Status FlagNeeds(const po::variables_map& vm, const char* flag, bool holds, const std::string& what) {
  return FlagNeedsSetting(flag, vm.count(flag) && !vm[flag].defaulted(), holds, what);
}

std::string FirstGivenFlag(const po::variables_map& vm, const po::options_description& desc,
                           const std::vector<std::string>& except) {
  for (const auto& option : desc.options()) {
    const std::string& name = option->long_name();
    if (std::find(except.begin(), except.end(), name) != except.end()) continue;
    if (vm.count(name) && !vm[name].defaulted()) return "--" + name;
  }
  return "";
}

void AddModelOptions(po::options_description& desc) {
  desc.add_options()
      ("model", po::value<std::string>(), "model preset (kimi-k2.6, kimi-k3, kimi-k3-debug, deepseek-v3)")
      ("model-file", po::value<std::string>(), "a model file in the preset format (docs/presets.md)")
      ("hidden", IntFlag(1, limits::kMaxHidden), "dense GPT model by flags: hidden size")
      ("ffn-hidden", IntFlag(1, limits::kMaxFfn), "dense GPT model: FFN hidden size (GeLU)")
      ("heads", IntFlag(1, limits::kMaxHeads), "dense GPT model: attention heads")
      ("head-dim", IntFlag(1, limits::kMaxHidden), "dense GPT model: head dimension (default hidden / heads)")
      ("kv-heads", IntFlag(1, limits::kMaxHeads), "dense GPT model: key/value heads (default heads)")
      ("layers", IntFlag(1, limits::kMaxLayers), "dense GPT model: layers")
      ("vocab", IntFlag(1, limits::kMaxVocab), "dense GPT model: vocabulary size");
}

namespace {

Result<ModelSpec> ModelFromFlags(const po::variables_map& vm) {
  for (const char* f : {"hidden", "ffn-hidden", "heads", "layers", "vocab"})
    if (!vm.count(f))
      return Status::InvalidArgument(std::string("--") + f + ": required for a model given by flags "
                                     "(--hidden --ffn-hidden --heads --layers --vocab)");
  ModelSpec m;
  m.name = "gpt-flags";
  m.hidden = vm["hidden"].as<int>();
  m.dense_ffn = vm["ffn-hidden"].as<int>();
  m.heads = vm["heads"].as<int>();
  m.layers = vm["layers"].as<int>();
  m.vocab = vm["vocab"].as<int>();
  if (m.heads <= 0) return Status::InvalidArgument("--heads: must be a positive integer, got " + std::to_string(m.heads));
  m.head_dim = vm.count("head-dim") ? vm["head-dim"].as<int>() : m.hidden / m.heads;
  m.kv_heads = vm.count("kv-heads") ? vm["kv-heads"].as<int>() : m.heads;
  m.gated_ffn = false;
  m.dropout = true;
  if (m.layers > 0) m.attention.assign(m.layers, AttentionKind::kMha);
  Status s = m.Validate();
  if (!s.ok()) return Status::InvalidArgument("--" + s.message());
  return m;
}

}  // namespace

Result<ModelSpec> ResolveModel(const po::variables_map& vm, const CliEnv& env, const std::string& fallback,
                               const std::string& fallback_field) {
  PresetCatalog catalog(env.fs, env.data.presets);
  const int given = int(vm.count("model")) + int(vm.count("model-file")) + int(vm.count("hidden") > 0);
  if (given > 1) return Status::InvalidArgument("--model: give one of --model, --model-file or the dense-GPT flags");
  if (vm.count("model")) return catalog.Model(vm["model"].as<std::string>());
  if (vm.count("model-file")) return catalog.ModelFile(vm["model-file"].as<std::string>());
  if (vm.count("hidden") || vm.count("layers") || vm.count("heads")) return ModelFromFlags(vm);
  if (!fallback.empty()) return catalog.Model(fallback, fallback_field);
  return Status::InvalidArgument("--model: name a model (--model, --model-file or the dense-GPT flags)");
}

void AddGpuOptions(po::options_description& desc) {
  desc.add_options()
      ("gpu", po::value<std::string>(), "GPU preset (a100-80g, h100, h200, b200, b300)")
      ("gpu-file", po::value<std::string>(), "a GPU file in the preset format");
}

Result<GpuSpec> ResolveGpu(const po::variables_map& vm, const CliEnv& env, const std::string& fallback,
                           const std::string& fallback_field) {
  PresetCatalog catalog(env.fs, env.data.presets);
  if (vm.count("gpu") && vm.count("gpu-file")) return Status::InvalidArgument("--gpu: give --gpu or --gpu-file, not both");
  if (vm.count("gpu")) return catalog.Gpu(vm["gpu"].as<std::string>());
  if (vm.count("gpu-file")) return catalog.GpuFile(vm["gpu-file"].as<std::string>());
  if (!fallback.empty()) return catalog.Gpu(fallback, fallback_field);
  return Status::InvalidArgument("--gpu: name a GPU (--gpu or --gpu-file)");
}

void AddOutputOptions(po::options_description& desc) {
  desc.add_options()
      ("json", "print JSON (stable schema, docs/) instead of a table")
      ("db", po::value<std::string>()->default_value("kimi-plan.db"), "the SQLite run store");
}

Result<bool> OnOff(const po::variables_map& vm, const char* name, bool fallback) {
  if (!vm.count(name)) return fallback;
  return ParseOnOff(name, vm[name].as<std::string>());
}

}  // namespace kp
