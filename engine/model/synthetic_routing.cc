#include "engine/model/synthetic_routing.h"

#include <cmath>
#include <map>

#include "absl/strings/str_cat.h"
#include "engine/core/dtype.h"
#include "engine/core/status_macros.h"
#include "engine/model/arch_spec.h"
#include "engine/model/synthetic_weights.h"

namespace vismoe {
namespace {

using R = WeightRole;

// The angle per token of the RoPE pairs the attention windows ride on: small
// enough that cos(theta * d) stays monotone over 1,500 tokens (no second
// window a period, 2 pi / theta, later).
constexpr double kTargetTheta = 0.002;

// A row-major matrix view over a synthetic tensor: [rows, cols] bf16.
struct Matrix {
  uint16_t* data;
  int64_t rows, cols;
  float at(int64_t r, int64_t c) const { return Bf16ToFloat(data[r * cols + c]); }
  void set(int64_t r, int64_t c, float v) { data[r * cols + c] = FloatToBf16(v); }
  void Scale(float s) {
    for (int64_t i = 0; i < rows * cols; ++i) data[i] = FloatToBf16(Bf16ToFloat(data[i]) * s);
  }
  void ZeroRow(int64_t r) {
    for (int64_t c = 0; c < cols; ++c) set(r, c, 0.0f);
  }
  void ZeroCol(int64_t c) {
    for (int64_t r = 0; r < rows; ++r) set(r, c, 0.0f);
  }
  void Fill(float v) {
    for (int64_t i = 0; i < rows * cols; ++i) data[i] = FloatToBf16(v);
  }
};

// The last two dimensions of a tensor as a matrix, `index` selecting among
// the leading ones (a fused expert tensor [E, a, b] holds E matrices).
Matrix MatrixOf(const SyntheticTensor& t, int64_t index = 0) {
  const Shape& s = t.spec->shape;
  const int64_t rows = s.size() >= 2 ? s[s.size() - 2] : 1;
  const int64_t cols = s.back();
  return Matrix{t.data + index * rows * cols, rows, cols};
}
int64_t MatrixCount(const SyntheticTensor& t) {
  const Shape& s = t.spec->shape;
  int64_t n = 1;
  for (size_t i = 0; i + 2 < s.size(); ++i) n *= s[i];
  return n;
}

// Multiplier that turns std kSyntheticStd into std `target`.
float ToStd(double target) { return static_cast<float>(target / kSyntheticStd); }

}  // namespace

absl::StatusOr<SyntheticRouting> ParseSyntheticRouting(const std::string& name) {
  if (name == "random") return SyntheticRouting::kRandom;
  if (name == "realistic") return SyntheticRouting::kRealistic;
  return absl::InvalidArgumentError(
      absl::StrCat("synthetic routing '", name, "': expected random or realistic"));
}

const char* SyntheticRoutingName(SyntheticRouting routing) {
  return routing == SyntheticRouting::kRealistic ? "realistic" : "random";
}

absl::StatusOr<RopePair> PickRopePair(const TextConfig& text, int axis, double target_theta) {
  const int half = text.head_dim / 2;
  if (half < 2) return absl::InvalidArgumentError("realistic routing needs head_dim >= 4");
  RopePair best;
  for (int j = 0; j < half; ++j) {
    // Under M-RoPE, pair j takes the image row (axis 1) when j % 3 == 1 and
    // the column (axis 2) when j % 3 == 2, inside their sections; the token
    // order (axis 0) otherwise (cpu::BuildRopeTable).
    int a = 0;
    if (!text.mrope_section.empty()) {
      for (int k = 1; k <= 2; ++k) {
        if (j % 3 == k && j < 3 * text.mrope_section[k]) a = k;
      }
    }
    if (a != axis) continue;
    const double theta = std::pow(text.rope_theta, -2.0 * j / text.head_dim);
    if (best.index < 0 || std::fabs(std::log(theta / target_theta)) <
                              std::fabs(std::log(best.theta / target_theta))) {
      best = {j, theta};
    }
  }
  if (best.index < 0) {
    return absl::InvalidArgumentError(absl::StrCat("no RoPE frequency pair on axis ", axis));
  }
  return best;
}

absl::Status ShapeForRealisticRouting(const ModelConfig& config,
                                      const RealisticRoutingParams& params,
                                      const std::vector<SyntheticTensor>& tensors,
                                      ThreadPool* pool) {
  const TextConfig& c = config.text;
  VISMOE_ASSIGN_OR_RETURN(const ArchSpec spec, ArchSpec::For(config));
  if (spec.qk_norm != QkNormScope::kPerHead || c.clip_qkv > 0) {
    // The construction below scales one dimension of every head through a
    // per-head norm.
    return absl::UnimplementedError(absl::StrCat(
        "realistic synthetic routing is built for per-head q/k norms without clip_qkv (the Qwen3 "
        "families); ",
        config.model_type, " has neither: use random synthetic routing"));
  }
  VISMOE_ASSIGN_OR_RETURN(const RopePair temporal, PickRopePair(c, 0, kTargetTheta));
  const int hd = c.head_dim;
  const double h = c.hidden_size;
  // q and k after their norms hold sqrt(hd) w at the pair's first dimension:
  // the score sqrt(hd) w^2 cos(theta d) ~ const - A theta^2 d^2 / 2 with
  // A = sqrt(hd) w^2 is a Gaussian window of std 1 / (theta sqrt(A)) tokens.
  const float w_t = static_cast<float>(std::sqrt(
      1.0 / (std::sqrt(static_cast<double>(hd)) * std::pow(temporal.theta * params.window, 2))));
  const float z = static_cast<float>(params.z * std::sqrt(h));
  auto shape = [&](const SyntheticTensor& t) {
    const TensorSpec& s = *t.spec;
    switch (s.role) {
      case R::kEmbed: {  // unit-variance token vectors, z in column 0
        Matrix m = MatrixOf(t);
        m.Scale(ToStd(1.0));
        for (int64_t r = 0; r < m.rows; ++r) m.set(r, 0, z);
        break;
      }
      case R::kQ:
      case R::kK: {  // every head reads z into the pair's first dimension
        Matrix m = MatrixOf(t);
        m.Fill(0.0f);
        for (int64_t head = 0; head < m.rows / hd; ++head) {
          m.set(head * hd + temporal.index, 0, 1.0f);
        }
        break;
      }
      case R::kQNorm:
      case R::kKNorm:
        MatrixOf(t).set(0, temporal.index, w_t);
        break;
      case R::kV: {  // values: unit-variance reads of everything but z
        Matrix m = MatrixOf(t);
        m.Scale(ToStd(1.0 / std::sqrt(h)));
        m.ZeroCol(0);
        break;
      }
      case R::kO: {  // the context each layer adds; never written into z
        Matrix m = MatrixOf(t);
        m.Scale(ToStd(params.context_gain / std::sqrt(static_cast<double>(m.cols))));
        m.ZeroRow(0);
        break;
      }
      case R::kRouter: {  // unit-variance logits; z read as each expert's popularity
        Matrix m = MatrixOf(t);
        const float z_read = static_cast<float>(
            params.popularity * std::sqrt(params.z * params.z + 1.0) / (params.z * std::sqrt(h)));
        for (int64_t e = 0; e < m.rows; ++e) m.set(e, 0, m.at(e, 0) / kSyntheticStd * z_read);
        for (int64_t e = 0; e < m.rows; ++e) {
          for (int64_t j = 1; j < m.cols; ++j) {
            m.set(e, j, m.at(e, j) * ToStd(1.0 / std::sqrt(h)));
          }
        }
        break;
      }
      case R::kMlpGate:
      case R::kMlpUp:
      case R::kExpertGate:
      case R::kExpertUp: {  // [out, H] readers: unit-variance outputs, blind to z
        Matrix m = MatrixOf(t);
        m.Scale(ToStd(1.0 / std::sqrt(h)));
        m.ZeroCol(0);
        break;
      }
      case R::kExpertsGateUp: {  // [E, H, 2I]: row 0 reads z
        for (int64_t e = 0; e < MatrixCount(t); ++e) {
          Matrix m = MatrixOf(t, e);
          m.Scale(ToStd(1.0 / std::sqrt(h)));
          m.ZeroRow(0);
        }
        break;
      }
      case R::kMlpDown:
      case R::kExpertDown: {  // [H, I] writers
        Matrix m = MatrixOf(t);
        m.Scale(ToStd(params.moe_gain / std::sqrt(static_cast<double>(m.cols))));
        m.ZeroRow(0);
        break;
      }
      case R::kExpertsDown: {  // [E, I, H]: column 0 writes z
        for (int64_t e = 0; e < MatrixCount(t); ++e) {
          Matrix m = MatrixOf(t, e);
          m.Scale(ToStd(params.moe_gain / std::sqrt(static_cast<double>(m.rows))));
          m.ZeroCol(0);
        }
        break;
      }
      case R::kMergerFc2Weight: {  // visual embeddings, z kept
        Matrix m = MatrixOf(t);
        m.Scale(ToStd(params.visual_gain / std::sqrt(static_cast<double>(m.cols))));
        m.ZeroRow(0);
        break;
      }
      case R::kPosEmbed:  // patches differ by place as much as by content
        MatrixOf(t).Scale(static_cast<float>(params.patch_position_gain));
        break;
      case R::kMergerFc2Bias:  // the final merger sets z; DeepStack adds none
        MatrixOf(t).Fill(0.0f);
        if (s.layer < 0) MatrixOf(t).set(0, 0, z);
        break;
      default:
        break;
    }
  };
  ParallelFor(pool, static_cast<int64_t>(tensors.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) shape(tensors[i]);
  });
  return absl::OkStatus();
}

}  // namespace vismoe
