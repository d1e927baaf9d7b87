// Shared fixtures of the planner tests: presets and a GPT-style model.
#ifndef KIMI_PLAN_PLANNER_TEST_UTIL_H_
#define KIMI_PLAN_PLANNER_TEST_UTIL_H_

#include <gtest/gtest.h>

#include "planner/plan_request.h"
#include "specs/presets.h"

namespace kp::testing {

inline ModelSpec Model(const std::string& name) {
  RealFileSystem fs;
  auto m = PresetCatalog(fs, DefaultPresetDir()).Model(name);
  EXPECT_TRUE(m.ok()) << m.status().message();
  return *m;
}

inline GpuSpec Gpu(const std::string& name) {
  RealFileSystem fs;
  auto g = PresetCatalog(fs, DefaultPresetDir()).Gpu(name);
  EXPECT_TRUE(g.ok()) << g.status().message();
  return *g;
}

/// GPT-3 style: MHA, GeLU FFN of 4h, dropout (the setting of Korthikanti et al.).
inline ModelSpec Gpt(int layers, int hidden, int heads, int vocab) {
  ModelSpec m;
  m.name = "gpt";
  m.layers = layers;
  m.hidden = hidden;
  m.heads = heads;
  m.head_dim = hidden / heads;
  m.kv_heads = heads;
  m.vocab = vocab;
  m.dense_ffn = 4 * hidden;
  m.gated_ffn = false;
  m.dropout = true;
  m.attention.assign(layers, AttentionKind::kMha);
  return m;
}

inline PlanRequest SeedRequest(const std::string& model, const std::string& gpu, int nodes) {
  PlanRequest r;
  r.model = Model(model);
  r.gpu = Gpu(gpu);
  r.nodes = nodes;
  r.gpus_per_node = 8;
  return r;
}

}  // namespace kp::testing

#endif  // KIMI_PLAN_PLANNER_TEST_UTIL_H_
