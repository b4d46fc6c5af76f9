#include "engine/runtime/model_runner.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "engine/core/status_macros.h"

namespace vismoe {
namespace {

// The mean of the rows of x [n, width] (of `rows` only, when given).
std::vector<float> MeanRows(const std::vector<float>& x, int64_t width,
                            const std::vector<int64_t>* rows) {
  std::vector<float> mean(static_cast<size_t>(width), 0.0f);
  const int64_t n = rows != nullptr ? static_cast<int64_t>(rows->size())
                                    : static_cast<int64_t>(x.size()) / std::max<int64_t>(width, 1);
  for (int64_t i = 0; i < n; ++i) {
    const float* r = x.data() + (rows != nullptr ? (*rows)[i] : i) * width;
    for (int64_t j = 0; j < width; ++j) mean[j] += r[j];
  }
  if (n > 0) {
    for (float& v : mean) v /= static_cast<float>(n);
  }
  return mean;
}

// `total` split in proportion to `rows` (largest remainder, ties to the earliest).
std::vector<uint64_t> SplitCount(uint64_t total, absl::Span<const int64_t> rows, int64_t sum) {
  std::vector<uint64_t> share(rows.size());
  std::vector<std::pair<uint64_t, size_t>> rest;  // (remainder, index)
  uint64_t given = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const unsigned __int128 scaled = static_cast<unsigned __int128>(total) * rows[i];
    share[i] = static_cast<uint64_t>(scaled / sum);
    rest.push_back({static_cast<uint64_t>(scaled % sum), i});
    given += share[i];
  }
  std::stable_sort(rest.begin(), rest.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t k = 0; given < total; ++k, ++given) ++share[rest[k].second];
  return share;
}

}  // namespace

std::vector<OffloadStats> SplitStats(const OffloadStats& total, absl::Span<const int64_t> rows) {
  std::vector<OffloadStats> out(rows.size());
  const int64_t sum = std::accumulate(rows.begin(), rows.end(), int64_t{0});
  if (sum <= 0) return out;
  auto split = [&](uint64_t OffloadStats::*field) {
    const std::vector<uint64_t> share = SplitCount(total.*field, rows, sum);
    for (size_t i = 0; i < rows.size(); ++i) out[i].*field = share[i];
  };
  split(&OffloadStats::cache_queries);
  split(&OffloadStats::cache_hits);
  split(&OffloadStats::prefetch_needed);
  split(&OffloadStats::prefetch_recalled);
  split(&OffloadStats::prefetch_issued);
  split(&OffloadStats::prefetch_used);
  split(&OffloadStats::bytes_h2d);
  split(&OffloadStats::preload_issued);
  split(&OffloadStats::preload_used);
  split(&OffloadStats::preload_kept_lookups);
  split(&OffloadStats::experts_host_computed);
  split(&OffloadStats::bytes_not_copied);
  for (size_t i = 0; i < rows.size(); ++i) {
    out[i].stall_seconds = total.stall_seconds * static_cast<double>(rows[i]) / sum;
  }
  return out;
}

absl::Status ModelRunner::SetUp(Sequence* seq) {
  if (seq->has_images()) {
    const Prompt& prompt = seq->prepared.prompt;
    VISMOE_ASSIGN_OR_RETURN(seq->vision, p_.vision->Forward(prompt.patches, prompt.grids));
    seq->result.usage.visual_tokens_before = static_cast<int>(seq->vision.num_tokens);
    seq->result.usage.visual_tokens_after = static_cast<int>(seq->vision.num_tokens);
    if (!seq->chunkable()) VISMOE_RETURN_IF_ERROR(SetUpCompression(seq));
    if (RouterObserver* obs = seq->observers(); obs != nullptr) {
      obs->OnVisualSummary(MeanRows(seq->vision.embeds, seq->vision.out_hidden, nullptr));
    }
  }
  seq->started = true;
  return absl::OkStatus();
}

// A preempted sequence prefills its prompt again: its compression starts
// afresh (the session records the pinned layers' routing of one prefill).
absl::Status ModelRunner::Restart(Sequence* seq) {
  if (seq->compression == nullptr) return absl::OkStatus();
  return SetUpCompression(seq);
}

absl::Status ModelRunner::SetUpCompression(Sequence* seq) {
  VISMOE_ASSIGN_OR_RETURN(seq->compressor, MakeTokenCompressor(seq->prepared.compression));
  seq->compression = std::make_unique<CompressionSession>(
      seq->compressor.get(), seq->prepared.prompt.ids, p_.image_token_id,
      seq->vision.tokens_per_image, seq->vision.saliency, p_.compress_layer, seq->observers(),
      seq->vision.layout);
  return absl::OkStatus();
}

void ModelRunner::BuildInput(const ScheduledChunk& chunk) {
  Sequence* s = chunk.seq;
  s->input = DecoderInput{};
  s->input.observer = s->observers();
  s->input.expert_skipping = s->skipping();
  s->input.skip_counts = &s->result.expert_skipping;
  s->input.commit = s->commit();
  s->input.commit_counts = &s->result.commit;
  s->input.speculative = p_.speculative;
  s->input.speculative_counts = &s->result.speculative;
  if (s->prefilling()) {
    BuildPrefillInput(s, chunk.rows);
    return;
  }
  DecoderInput& in = s->input;
  in.tokens = absl::MakeConstSpan(&s->result.token_ids.back(), 1);
  in.phase = Phase::kDecode;
  in.first_decode_step = s->result.token_ids.size() == 1;  // the prefill sampled one
  const int64_t delta = s->has_images() ? s->prepared.prompt.mrope.rope_delta : 0;
  const int64_t pos = s->cache->length() + delta;
  in.positions = {pos, pos, pos};
}

// Prompt tokens [prefilled, prefilled + rows): their slice of the positions
// and of the visual and DeepStack rows (the image tokens in the slice, in order).
// Past the prompt (a preempted sequence's generated tokens): text at the
// positions their decode steps had.
void ModelRunner::BuildPrefillInput(Sequence* s, int64_t rows) {
  const Prompt& prompt = s->prepared.prompt;
  DecoderInput& in = s->input;
  const int64_t start = s->prefilled;
  in.phase = Phase::kPrefill;
  in.rope_length = s->prefill_tokens();
  in.is_cancelled = s->callbacks.is_cancelled;
  if (start >= s->prompt_tokens()) {
    in.tokens = absl::MakeConstSpan(s->result.token_ids).subspan(start - s->prompt_tokens(), rows);
    if (!s->has_images()) return;  // text positions: the cache length on
    const int64_t pos = start + prompt.mrope.rope_delta;
    for (int axis = 0; axis < 3; ++axis) {
      for (int64_t i = 0; i < rows; ++i) in.positions.push_back(pos + i);
    }
    return;
  }
  in.tokens = absl::MakeConstSpan(prompt.ids).subspan(start, rows);
  if (!s->has_images()) return;
  const int64_t total = s->prompt_tokens();
  for (int axis = 0; axis < 3; ++axis) {
    const auto from = prompt.mrope.positions.begin() + axis * total + start;
    in.positions.insert(in.positions.end(), from, from + rows);
  }
  const auto ids = prompt.ids.begin();
  const int64_t v0 = std::count(ids, ids + start, p_.image_token_id);
  const int64_t nv = std::count(ids + start, ids + start + rows, p_.image_token_id);
  if (nv > 0) {
    const int64_t offset = v0 * s->vision.out_hidden;
    in.visual_embeds = s->vision.embeds.data() + offset;
    in.num_visual = nv;
    for (const std::vector<float>& ds : s->vision.deepstack) {
      in.deepstack.push_back(ds.data() + offset);
    }
  }
  if (s->compression != nullptr && start == 0) InstallCompression(s);
}

// The whole prompt is in this input: compressed prefills are not chunked.
void ModelRunner::InstallCompression(Sequence* s) {
  DecoderInput& in = s->input;
  s->compression->Install(&in);
  RouterObserver* obs = s->observers();
  if (obs == nullptr) return;
  // h_v again, over the visual tokens that survived.
  in.select_kept_rows =
      [s, obs, select = std::move(in.select_kept_rows)]() -> absl::StatusOr<std::vector<int64_t>> {
    absl::StatusOr<std::vector<int64_t>> rows = select();
    if (rows.ok()) {
      obs->OnVisualSummary(
          MeanRows(s->vision.embeds, s->vision.out_hidden, &s->compression->kept_visual()));
    }
    return rows;
  };
}

namespace {

// What a forward pass adds to a sequence's policy counters: undone before
// the pass runs again.
struct PassCounts {
  ExpertSkipCounts skipping;
  CommitCounts commit;
  SpeculativeCounts speculative;
};

PassCounts CountsOf(const Sequence& s) {
  return {s.result.expert_skipping, s.result.commit, s.result.speculative};
}

void Restore(const PassCounts& c, Sequence* s) {
  s->result.expert_skipping = c.skipping;
  s->result.commit = c.commit;
  s->result.speculative = c.speculative;
}

}  // namespace

std::vector<absl::Status> ModelRunner::Run(absl::Span<const ScheduledChunk> step) {
  std::vector<absl::Status> st(step.size());
  std::vector<char> ran(step.size(), 0);  // in the forward pass
  std::vector<size_t> live;               // the chunks in the next pass
  for (size_t i = 0; i < step.size(); ++i) {
    Sequence* s = step[i].seq;
    if (!s->started) {
      st[i] = SetUp(s);
    } else if (s->prefilled == 0) {
      st[i] = Restart(s);
    }
    if (!st[i].ok()) continue;
    live.push_back(i);
    ran[i] = 1;
  }
  std::vector<PassCounts> before(step.size());
  for (size_t i : live) before[i] = CountsOf(*step[i].seq);
  absl::Status fwd = absl::OkStatus();
  while (!live.empty()) {
    std::vector<DecoderBatchEntry> batch;
    for (size_t i : live) {
      Sequence* s = step[i].seq;
      BuildInput(step[i]);
      s->draw = s->output.NextDraw();  // kept until a token is accepted
      batch.push_back({&s->input, s->cache.get(), &s->logits,
                       s->tokens_only() ? &s->token : nullptr, &s->draw});
    }
    fwd = p_.model->ForwardBatch(batch, p_.experts);
    const std::optional<size_t> failed = FailedEntry(fwd);
    if (fwd.ok() || !failed.has_value() || *failed >= live.size()) break;
    // One sequence's own error ends it alone; the others run the step again
    // (no cache advanced), each as it would have without it.
    st[live[*failed]] = WithoutEntry(fwd);
    live.erase(live.begin() + static_cast<std::ptrdiff_t>(*failed));
    for (size_t i : live) Restore(before[i], step[i].seq);
  }
  fwd = WithoutEntry(fwd);
  for (size_t i : live) {
    st[i] = fwd;
    Sequence* s = step[i].seq;
    if (!fwd.ok() || !s->prefilling()) continue;
    s->prefilled += step[i].rows;
    if (s->prefilled == s->prompt_tokens()) ReportCompression(s);
  }
  ShareStats(step, ran);
  return st;
}

void ModelRunner::StartPreload(Sequence* seq) {
  if (seq->preload == nullptr || seq->preload->started()) return;
  seq->preload->Start();
  if (p_.take_stats) seq->result.offload.Add(p_.take_stats());
}

// Once per sequence (a preempted one compresses its prompt again, alike).
void ModelRunner::ReportCompression(Sequence* s) {
  if (s->compression == nullptr || s->compression_reported) return;
  s->compression_reported = true;
  s->result.usage.visual_tokens_after = static_cast<int>(s->compression->visual_after());
  if (p_.stats == nullptr) return;
  p_.stats->OnVisualTokensPruned(
      static_cast<uint64_t>(s->compression->visual_before() - s->compression->visual_after()));
  p_.stats->OnCompressionTime(s->compression->seconds());
}

// Sequences whose setup or restart failed did not run and get no share; a
// failed forward pass still moved what it moved, shared by those in it.
void ModelRunner::ShareStats(absl::Span<const ScheduledChunk> step, const std::vector<char>& ran) {
  const OffloadStats total = p_.take_stats();
  std::vector<int64_t> rows;
  std::vector<Sequence*> seqs;
  for (size_t i = 0; i < step.size(); ++i) {
    if (ran[i]) {
      rows.push_back(step[i].rows);
      seqs.push_back(step[i].seq);
    }
  }
  const std::vector<OffloadStats> shares = SplitStats(total, rows);
  for (size_t i = 0; i < seqs.size(); ++i) seqs[i]->result.offload.Add(shares[i]);
}

}  // namespace vismoe
