// The SDPO losses against numbers computed here independently: explicit loops
// in double over small vocabularies, no LibTorch arithmetic in the expected
// values.
#include "runtime/sdpo/sdpo_loss.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

namespace kp::runtime {
namespace {

using Dist = std::vector<double>;

Dist Softmax(const Dist& z) {
  const double mx = *std::max_element(z.begin(), z.end());
  Dist p(z.size());
  double sum = 0;
  for (std::size_t i = 0; i < z.size(); ++i) sum += p[i] = std::exp(z[i] - mx);
  for (double& x : p) x /= sum;
  return p;
}

// KL(a || b) = sum a log(a / b), 0 log 0 = 0.
double KlHand(const Dist& a, const Dist& b) {
  double kl = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i] > 0) kl += a[i] * std::log(a[i] / b[i]);
  return kl;
}

double AlphaHand(const Dist& p, const Dist& q, double alpha) {
  if (alpha == 0) return KlHand(q, p);
  if (alpha == 1) return KlHand(p, q);
  Dist m(p.size());
  for (std::size_t i = 0; i < p.size(); ++i) m[i] = (1 - alpha) * p[i] + alpha * q[i];
  return (1 - alpha) * KlHand(p, m) + alpha * KlHand(q, m);
}

// The student's top-k ids (largest logits first), the two distributions
// restricted to them, then a tail bucket or a renormalisation.
std::pair<Dist, Dist> TopKHand(const Dist& zs, const Dist& zt, int k, bool tail) {
  const Dist ps = Softmax(zs), pt = Softmax(zt);
  std::vector<int> ids(zs.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::sort(ids.begin(), ids.end(), [&](int a, int b) { return zs[a] > zs[b]; });
  Dist p, q;
  for (int i = 0; i < k; ++i) p.push_back(ps[ids[i]]), q.push_back(pt[ids[i]]);
  const double sp = std::accumulate(p.begin(), p.end(), 0.0), sq = std::accumulate(q.begin(), q.end(), 0.0);
  if (tail) {
    p.push_back(1 - sp);
    q.push_back(1 - sq);
  } else {
    for (double& x : p) x /= sp;
    for (double& x : q) x /= sq;
  }
  return {p, q};
}

torch::Tensor T(const Dist& v) { return torch::tensor(v, torch::kDouble); }
torch::Tensor LogT(const Dist& v) { return T(v).log(); }

const Dist kStudentLogits = {1.0, -0.5, 2.0, 0.3, -1.2};
const Dist kTeacherLogits = {0.2, 0.9, 1.5, -0.7, 0.4};

TEST(AlphaDivergenceTest, EndpointsAreTheTwoKlDirections) {
  const Dist p = Softmax(kStudentLogits), q = Softmax(kTeacherLogits);
  EXPECT_NEAR(AlphaDivergence(LogT(p), LogT(q), 0.0).item<double>(), KlHand(q, p), 1e-12);  // forward
  EXPECT_NEAR(AlphaDivergence(LogT(p), LogT(q), 1.0).item<double>(), KlHand(p, q), 1e-12);  // reverse
  EXPECT_GT(std::fabs(KlHand(q, p) - KlHand(p, q)), 1e-3);  // the two directions really differ here
}

TEST(AlphaDivergenceTest, MiddleIsTheSkewedJensenShannon) {
  const Dist p = Softmax(kStudentLogits), q = Softmax(kTeacherLogits);
  Dist m(p.size());
  for (std::size_t i = 0; i < p.size(); ++i) m[i] = 0.5 * (p[i] + q[i]);
  const double js = 0.5 * KlHand(p, m) + 0.5 * KlHand(q, m);
  EXPECT_NEAR(AlphaDivergence(LogT(p), LogT(q), 0.5).item<double>(), js, 1e-12);
  EXPECT_LE(js, std::log(2.0));
  for (double alpha : {0.1, 0.3, 0.9})
    EXPECT_NEAR(AlphaDivergence(LogT(p), LogT(q), alpha).item<double>(), AlphaHand(p, q, alpha), 1e-12) << alpha;
  // Identical distributions: 0 for every alpha.
  for (double alpha : {0.0, 0.25, 1.0}) EXPECT_NEAR(AlphaDivergence(LogT(p), LogT(p), alpha).item<double>(), 0, 1e-15);
}

TEST(AlphaDivergenceTest, BatchedOverLeadingDims) {
  const Dist z2 = {0.0, 0.0, 3.0, 0.0, 0.0};
  torch::Tensor s = torch::stack({T(kStudentLogits), T(z2)}).view({2, 1, 5}).log_softmax(-1);
  torch::Tensor t = torch::stack({T(kTeacherLogits), T(kStudentLogits)}).view({2, 1, 5}).log_softmax(-1);
  torch::Tensor d = AlphaDivergence(s, t, 1.0);
  ASSERT_EQ(d.sizes(), (std::vector<int64_t>{2, 1}));
  EXPECT_NEAR(d[0][0].item<double>(), KlHand(Softmax(kStudentLogits), Softmax(kTeacherLogits)), 1e-12);
  EXPECT_NEAR(d[1][0].item<double>(), KlHand(Softmax(z2), Softmax(kStudentLogits)), 1e-12);
}

TEST(TailBucketTest, TailHoldsTheMissingMass) {
  const Dist top = {0.5, 0.2, 0.05};
  torch::Tensor out = AddTailBucket(LogT(top)).exp();
  ASSERT_EQ(out.size(0), 4);
  EXPECT_NEAR(out[3].item<double>(), 1 - 0.75, 1e-12);
  EXPECT_NEAR(out.sum().item<double>(), 1.0, 1e-12);
  // Mass 1: the tail is capped tiny, not -inf.
  torch::Tensor full = AddTailBucket(LogT({0.5, 0.5}));
  EXPECT_TRUE(std::isfinite(full[2].item<double>()));
  EXPECT_LT(full[2].exp().item<double>(), 1e-6);
}

TEST(TopKDistillationTest, FullVocabularyIsFullDivergence) {
  const Dist p = Softmax(kStudentLogits), q = Softmax(kTeacherLogits);
  for (double alpha : {0.0, 0.5, 1.0}) {
    const double want = AlphaHand(p, q, alpha);
    for (int k : {0, 5, 9}) {  // 0: full; 5 = V; 9 > V
      DistillOptions o{k, true, alpha, 0};
      EXPECT_NEAR(TopKDistillation(T(kStudentLogits), T(kTeacherLogits), o).item<double>(), want, 1e-12)
          << "alpha " << alpha << " k " << k;
    }
    // And the tail-bucket path itself at k = V: its (capped) empty tail
    // changes nothing beyond 1e-6.
    torch::Tensor sp = AddTailBucket(T(kStudentLogits).log_softmax(-1));
    torch::Tensor tp = AddTailBucket(T(kTeacherLogits).log_softmax(-1));
    EXPECT_NEAR(AlphaDivergence(sp, tp, alpha).item<double>(), want, 1e-6) << alpha;
  }
}

TEST(TopKDistillationTest, TopKWithTailAndRenormalisedMatchHandValues) {
  for (bool tail : {true, false}) {
    for (double alpha : {0.0, 0.5, 1.0}) {
      for (int k : {1, 2, 3}) {
        auto [p, q] = TopKHand(kStudentLogits, kTeacherLogits, k, tail);
        DistillOptions o{k, tail, alpha, 0};
        EXPECT_NEAR(TopKDistillation(T(kStudentLogits), T(kTeacherLogits), o).item<double>(), AlphaHand(p, q, alpha),
                    1e-12)
            << "tail " << tail << " alpha " << alpha << " k " << k;
      }
    }
  }
}

TEST(TopKDistillationTest, SupportIsTheStudentsTopK) {
  // The teacher's favourite (id 4) is outside the student's top 2 (ids 2, 0):
  // with a tail its mass goes to the tail bucket.
  const Dist zs = {1.0, -3.0, 2.0, -3.0, -3.0}, zt = {0.0, 0.0, 0.0, 0.0, 5.0};
  auto [p, q] = TopKHand(zs, zt, 2, true);
  EXPECT_GT(q.back(), 0.9);
  DistillOptions o{2, true, 0.0, 0};
  EXPECT_NEAR(TopKDistillation(T(zs), T(zt), o).item<double>(), KlHand(q, p), 1e-12);
}

TEST(TopKDistillationTest, GradientReachesOnlyTheStudentAndIsPMinusQForForwardKl) {
  torch::Tensor zs = T(kStudentLogits).requires_grad_(true);
  torch::Tensor zt = T(kTeacherLogits).requires_grad_(true);
  DistillOptions o{0, true, 0.0, 0};
  TopKDistillation(zs, zt, o).backward();
  // d/dz KL(q || softmax(z)) = softmax(z) - q.
  const Dist p = Softmax(kStudentLogits), q = Softmax(kTeacherLogits);
  for (int i = 0; i < 5; ++i) EXPECT_NEAR(zs.grad()[i].item<double>(), p[i] - q[i], 1e-12);
  EXPECT_FALSE(zt.grad().defined());
}

TEST(TopKDistillationTest, MinusInfinityLogitsGiveFiniteLossesAndGradients) {
  const double inf = std::numeric_limits<double>::infinity();
  for (double alpha : {0.0, 0.5, 1.0}) {
    torch::Tensor zs = T({1.0, -inf, 0.5}).requires_grad_(true);
    torch::Tensor zt = T({0.3, -inf, 0.1});
    torch::Tensor d = TopKDistillation(zs, zt, DistillOptions{0, true, alpha, 0});
    d.backward();
    EXPECT_NEAR(d.item<double>(), AlphaHand(Softmax({1.0, 0.5}), Softmax({0.3, 0.1}), alpha), 1e-12) << alpha;
    EXPECT_TRUE(torch::isfinite(zs.grad()).all().item<bool>()) << alpha;
  }
}

TEST(ImportanceWeightTest, ClipsTheRatioAboveAtTheConfiguredValue) {
  // Ratios 0.5, 1, 1.5, 3, exp(30) (clamped at exp(20) before the clip).
  torch::Tensor old = torch::zeros({5}, torch::kDouble);
  torch::Tensor logp = T({std::log(0.5), 0.0, std::log(1.5), std::log(3.0), 30.0}).requires_grad_(true);
  torch::Tensor w = ImportanceWeight(logp, old, 2.0);
  const Dist want = {0.5, 1.0, 1.5, 2.0, 2.0};
  for (int i = 0; i < 5; ++i) EXPECT_NEAR(w[i].item<double>(), want[i], 1e-12) << i;
  EXPECT_FALSE(w.requires_grad());
  EXPECT_NEAR(ImportanceWeight(logp, old, 1e12)[4].item<double>(), std::exp(20.0), 1e-3);
}

TEST(SdpoLossTest, WeightedTokenMeanOverTheMask) {
  // Two tokens of one response and one of another; the third is masked out.
  const Dist zs1 = kStudentLogits, zs2 = {0.0, 1.0, 0.0, -1.0, 0.5}, zs3 = {3.0, 0.0, 0.0, 0.0, 0.0};
  torch::Tensor s = torch::stack({T(zs1), T(zs2), T(zs3)}).view({3, 5});
  torch::Tensor t = torch::stack({T(kTeacherLogits), T(zs1), T(zs2)}).view({3, 5});
  torch::Tensor logp = T({0.0, std::log(3.0), 0.0}), old = T({std::log(2.0), 0.0, 0.0});
  torch::Tensor mask = torch::tensor({1, 1, 0});
  DistillOptions o{2, true, 0.5, 2.0};
  const double w1 = 0.5, w2 = 2.0;  // ratios 1/2 and 3 (clipped to 2)
  auto [p1, q1] = TopKHand(zs1, kTeacherLogits, 2, true);
  auto [p2, q2] = TopKHand(zs2, zs1, 2, true);
  const double want = (w1 * AlphaHand(p1, q1, 0.5) + w2 * AlphaHand(p2, q2, 0.5)) / 2;
  EXPECT_NEAR(SdpoLoss(s, t, logp, old, mask, o).item<double>(), want, 1e-12);
  o.is_clip = 0;  // off: plain mean
  EXPECT_NEAR(SdpoLoss(s, t, logp, old, mask, o).item<double>(),
              (AlphaHand(p1, q1, 0.5) + AlphaHand(p2, q2, 0.5)) / 2, 1e-12);
  EXPECT_EQ(SdpoLoss(s, t, logp, old, torch::zeros({3}), o).item<double>(), 0.0);  // empty mask
}

TEST(GrpoAdvantagesTest, EqualRewardsGiveZero) {
  torch::Tensor a = GrpoAdvantages(T({1, 1, 1, 1, 0, 0, 0, 0}), 4);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(a[i].item<double>(), 0.0);
}

TEST(GrpoAdvantagesTest, MeanAndUnbiasedStdPerGroup) {
  // Group 1: {1, 0, 0, 1}: mean 0.5, unbiased std sqrt(4 * 0.25 / 3).
  // Group 2: {1, 0, 0, 0}: mean 0.25, unbiased std sqrt((0.5625 + 3 * 0.0625) / 3).
  torch::Tensor a = GrpoAdvantages(T({1, 0, 0, 1, 1, 0, 0, 0}), 4);
  const double s1 = std::sqrt(1.0 / 3), s2 = std::sqrt(0.75 / 3), eps = 1e-6;
  const Dist want = {0.5 / (s1 + eps), -0.5 / (s1 + eps), -0.5 / (s1 + eps), 0.5 / (s1 + eps),
                     0.75 / (s2 + eps), -0.25 / (s2 + eps), -0.25 / (s2 + eps), -0.25 / (s2 + eps)};
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(a[i].item<double>(), want[i], 1e-12) << i;
  torch::Tensor centred = GrpoAdvantages(T({1, 0, 0, 1, 1, 0, 0, 0}), 4, /*normalize_std=*/false);
  EXPECT_NEAR(centred[4].item<double>(), 0.75, 1e-15);
  EXPECT_NEAR(centred[5].item<double>(), -0.25, 1e-15);
  torch::Tensor lone = GrpoAdvantages(T({1, 0}), 1);
  EXPECT_NEAR(lone[0].item<double>(), 1 / (1 + eps), 1e-15);
  EXPECT_EQ(lone[1].item<double>(), 0.0);
  EXPECT_EQ(GrpoAdvantages(torch::ones({4}, torch::kFloat), 2).scalar_type(), torch::kFloat);
  EXPECT_THROW(GrpoAdvantages(T({1, 0, 1}), 2), c10::Error);
}

TEST(ClippedPolicyLossTest, ClipsBothSidesAndDualClipsNegativeAdvantages) {
  const PolicyClip clip{0.2, 0.2, 3.0};
  // (A, ratio) -> loss, worked by hand.
  struct Case { double a, ratio, want; };
  const Case cases[] = {
      {1, 1.5, -1.2},   // max(-1.5, -1.2): the gain is capped at 1 + high
      {1, 0.5, -0.5},   // max(-0.5, -0.8): below 1 - low the unclipped term wins
      {-1, 0.5, 0.8},   // max(0.5, 0.8): the clipped term wins
      {-1, 2.0, 2.0},   // max(2, 1.2) = 2 < 3
      {-1, 5.0, 3.0},   // max(5, 1.2) = 5, dual-clipped to 3
      {0, 7.0, 0.0},
  };
  for (const Case& c : cases) {
    torch::Tensor loss = ClippedPolicyLoss(T({std::log(c.ratio)}), T({0.0}), T({c.a}), clip);
    EXPECT_NEAR(loss[0].item<double>(), c.want, 1e-12) << c.a << " " << c.ratio;
  }
}

TEST(K1OpdTest, LossAndGradientOnPolicy) {
  // On policy (old = current) the ratio is 1, the loss is the mean k1 and its
  // gradient with respect to log pi is k1 / tokens: the REINFORCE estimate
  // of the reverse KL's gradient.
  torch::Tensor logp = T({-0.5, -1.0, -2.0, -0.1}).requires_grad_(true);
  torch::Tensor teacher = T({-0.7, -0.4, -2.0, -3.0}).requires_grad_(true);
  torch::Tensor mask = torch::tensor({1, 1, 1, 0});
  EXPECT_NEAR(K1(logp, teacher)[0].item<double>(), 0.2, 1e-12);
  torch::Tensor loss = K1OpdLoss(logp, logp.detach(), teacher, mask, PolicyClip{});
  const Dist k1 = {0.2, -0.6, 0.0, 2.9};
  EXPECT_NEAR(loss.item<double>(), (0.2 - 0.6 + 0.0) / 3, 1e-12);
  loss.backward();
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(logp.grad()[i].item<double>(), i < 3 ? k1[i] / 3 : 0.0, 1e-12) << i;
  EXPECT_FALSE(teacher.grad().defined());
}

TEST(K1OpdTest, OffPolicyRatiosAreClipped) {
  // k1 = 0.5 > 0, so A = -0.5 < 0; the ratio 2 gives max(1.0, 0.6) = 1.0.
  torch::Tensor loss = K1OpdLoss(T({std::log(2.0)}), T({0.0}), T({std::log(2.0) - 0.5}), torch::ones({1}),
                                 PolicyClip{0.2, 0.2, 3.0});
  EXPECT_NEAR(loss.item<double>(), 1.0, 1e-12);
}

TEST(EmaUpdateTest, MovesTheTeacherByTheRate) {
  torch::Tensor t1 = T({1.0, 2.0}), t2 = T({0.0});
  torch::Tensor s1 = T({3.0, -2.0}).requires_grad_(true), s2 = T({10.0});
  ASSERT_TRUE(EmaUpdate({t1, t2}, {s1, s2}, 0.25).ok());
  EXPECT_NEAR(t1[0].item<double>(), 0.75 * 1 + 0.25 * 3, 1e-15);
  EXPECT_NEAR(t1[1].item<double>(), 0.75 * 2 + 0.25 * -2, 1e-15);
  EXPECT_NEAR(t2[0].item<double>(), 2.5, 1e-15);
  EXPECT_FALSE(t1.requires_grad());
  // Rate 0 keeps the teacher, rate 1 copies the student.
  ASSERT_TRUE(EmaUpdate({t2}, {s2}, 0.0).ok());
  EXPECT_EQ(t2[0].item<double>(), 2.5);
  ASSERT_TRUE(EmaUpdate({t2}, {s2}, 1.0).ok());
  EXPECT_EQ(t2[0].item<double>(), 10.0);
  // A float student into a double teacher.
  torch::Tensor f = torch::full({1}, 4.0f);
  ASSERT_TRUE(EmaUpdate({t2}, {f}, 0.5).ok());
  EXPECT_EQ(t2[0].item<double>(), 7.0);
}

TEST(EmaUpdateTest, MismatchesAreErrorsAndWriteNothing) {
  torch::Tensor t1 = T({1.0, 2.0}), t2 = T({0.0});
  EXPECT_EQ(EmaUpdate({t1, t2}, {T({5.0, 5.0})}, 0.5).code(), Status::Code::kInvalidArgument);
  Status s = EmaUpdate({t1, t2}, {T({5.0, 5.0}), T({1.0, 1.0})}, 0.5);
  EXPECT_NE(s.message().find("tensor 1"), std::string::npos) << s.message();
  EXPECT_EQ(t1[0].item<double>(), 1.0);  // the first pair was not updated either
  EXPECT_NE(EmaUpdate({t1}, {t1}, 1.5).message().find("--teacher-ema"), std::string::npos);
}

TEST(SdpoOptionsTest, ValidationNamesTheFlag) {
  EXPECT_TRUE(ValidateSdpoOptions(DistillOptions{}, PolicyClip{}).ok());
  DistillOptions d;
  d.alpha = 1.5;
  EXPECT_EQ(ValidateSdpoOptions(d, PolicyClip{}).message(), "--alpha: must be in [0, 1]");
  d = {};
  d.top_k = -1;
  EXPECT_NE(ValidateSdpoOptions(d, PolicyClip{}).message().find("--top-k"), std::string::npos);
  d = {};
  d.is_clip = 0.5;
  EXPECT_NE(ValidateSdpoOptions(d, PolicyClip{}).message().find("--is-clip"), std::string::npos);
  EXPECT_NE(ValidateSdpoOptions(DistillOptions{}, PolicyClip{0.2, 0.2, 1.0}).message().find("--clip-dual"),
            std::string::npos);
}

}  // namespace
}  // namespace kp::runtime
