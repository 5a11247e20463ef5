#include "runtime/generate/paged_kv_cache.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/generate/fused_decode_attention.h"
#include "runtime/torch_compat.h"

namespace dslaunch::runtime {

PagedKvCache::PagedKvCache(const PagedKvCacheOptions& options) : options_(options) {}

absl::StatusOr<std::unique_ptr<PagedKvCache>> PagedKvCache::Create(const PagedKvCacheOptions& options) {
  if (options.layers < 1 || options.kv_heads < 1 || options.head_dim < 1) {
    return absl::InvalidArgumentError(absl::StrCat("a key/value cache needs layers, kv_heads and head_dim >= 1 (got ",
                                                   options.layers, ", ", options.kv_heads, ", ", options.head_dim, ")"));
  }
  if (options.block_size < 1 || options.blocks < 1 || options.key_length_multiple < 1) {
    return absl::InvalidArgumentError(absl::StrCat("a key/value cache needs block_size, blocks and key_length_multiple >= 1 (got ",
                                                   options.block_size, ", ", options.blocks, ", ",
                                                   options.key_length_multiple, ")"));
  }
  if (options.fused_decode_attention) {
    if (absl::Status problem = FusedDecodeAttentionProblem(options.device, options.head_dim); !problem.ok()) {
      return problem;
    }
  }
  auto cache = std::unique_ptr<PagedKvCache>(new PagedKvCache(options));
  const auto tensor_options = torch::TensorOptions().dtype(options.dtype).device(options.device);
  try {
    for (int64_t layer = 0; layer < options.layers; ++layer) {
      cache->keys_.push_back(
          torch::zeros({options.blocks * options.block_size, options.kv_heads, options.head_dim}, tensor_options));
      cache->values_.push_back(torch::zeros_like(cache->keys_.back()));
    }
  } catch (const c10::Error& e) {
    return absl::ResourceExhaustedError(absl::StrCat("a key/value cache of ", options.blocks, " blocks x ",
                                                     options.block_size, " positions: ", e.what_without_backtrace()));
  }
  // Block 0 is given first.
  for (int64_t block = options.blocks; block-- > 0;) cache->free_.push_back(block);
  return cache;
}

int64_t PagedKvCache::bytes_per_position() const {
  return 2 * options_.layers * options_.kv_heads * options_.head_dim * c10::elementSize(options_.dtype);
}

int64_t PagedKvCache::bytes() const { return bytes_per_position() * options_.blocks * options_.block_size; }

absl::Status PagedKvCache::Reserve(int64_t sequence, int64_t positions) {
  std::vector<int64_t>& table = tables_[sequence];
  const int64_t more = BlocksFor(positions) - static_cast<int64_t>(table.size());
  if (more <= 0) return absl::OkStatus();
  if (more > free_blocks()) {
    if (table.empty()) tables_.erase(sequence);
    return absl::ResourceExhaustedError(absl::StrCat("the key/value cache has ", free_blocks(), " free blocks of ",
                                                     options_.block_size, " positions; ", positions,
                                                     " positions need ", more, " more"));
  }
  for (int64_t i = 0; i < more; ++i) {
    table.push_back(free_.back());
    free_.pop_back();
  }
  return absl::OkStatus();
}

void PagedKvCache::Release(int64_t sequence) {
  auto it = tables_.find(sequence);
  if (it == tables_.end()) return;
  for (auto block = it->second.rbegin(); block != it->second.rend(); ++block) free_.push_back(*block);
  tables_.erase(it);
}

int64_t PagedKvCache::Capacity(int64_t sequence) const {
  auto it = tables_.find(sequence);
  return it == tables_.end() ? 0 : static_cast<int64_t>(it->second.size()) * options_.block_size;
}

torch::Tensor PagedKvCache::Slots(int64_t sequence, int64_t end, int64_t padded) const {
  const std::vector<int64_t>& table = tables_.at(sequence);
  std::vector<int64_t> slots(static_cast<size_t>(padded), 0);
  for (int64_t p = 0; p < end; ++p) slots[p] = table[p / options_.block_size] * options_.block_size + p % options_.block_size;
  return torch::tensor(slots, torch::kLong).to(options_.device);
}

absl::Status PagedKvCache::CheckPiece(const StepPiece& piece) const {
  if (piece.count < 1 || piece.first < 0) {
    return absl::InvalidArgumentError(absl::StrCat("a step piece of sequence ", piece.sequence, " at ", piece.first,
                                                   " with ", piece.count, " tokens"));
  }
  const int64_t end = piece.first + piece.count;
  if (Capacity(piece.sequence) < end) {
    return absl::FailedPreconditionError(absl::StrCat("sequence ", piece.sequence, " has room for ",
                                                      Capacity(piece.sequence), " positions, not ", end));
  }
  return absl::OkStatus();
}

PagedKvCache::DecodeTables PagedKvCache::DecodeTablesOf(const std::vector<StepPiece>& decodes) const {
  DecodeTables tables;
  for (const StepPiece& piece : decodes) tables.longest = std::max(tables.longest, piece.first + 1);
  tables.longest = Padded(tables.longest);
  tables.visible.assign(decodes.size() * static_cast<size_t>(tables.longest), 0);
  for (size_t d = 0; d < decodes.size(); ++d) {
    const std::vector<int64_t>& table = tables_.at(decodes[d].sequence);
    const int64_t end = decodes[d].first + 1;
    int64_t* row = tables.visible.data() + d * tables.longest;
    for (int64_t p = 0; p < end; ++p) row[p] = table[p / options_.block_size] * options_.block_size + p % options_.block_size;
    tables.written.push_back(row[end - 1]);
    tables.ends.push_back(end);
  }
  return tables;
}

absl::StatusOr<PagedKvCache::DecodeTables> PagedKvCache::PlanDecodes(const std::vector<StepPiece>& pieces) const {
  for (const StepPiece& piece : pieces) {
    if (absl::Status checked = CheckPiece(piece); !checked.ok()) return checked;
    if (piece.count != 1) {
      return absl::InvalidArgumentError(absl::StrCat("a decode step's pieces are one token each (sequence ",
                                                     piece.sequence, " has ", piece.count, ")"));
    }
  }
  return DecodeTablesOf(pieces);
}

absl::StatusOr<std::unique_ptr<PagedKvCache::Step>> PagedKvCache::BeginStep(const std::vector<StepPiece>& pieces) {
  std::vector<Step::Piece> planned;
  std::vector<StepPiece> one_token;
  std::vector<int64_t> decode_offsets;
  int64_t offset = 0;
  const auto bool_options = torch::TensorOptions().dtype(torch::kBool).device(options_.device);
  for (const StepPiece& piece : pieces) {
    if (absl::Status checked = CheckPiece(piece); !checked.ok()) return checked;
    if (piece.count == 1) {
      one_token.push_back(piece);
      decode_offsets.push_back(offset);
      offset += 1;
      continue;
    }
    const int64_t end = piece.first + piece.count;
    Step::Piece p;
    p.offset = offset;
    p.count = piece.count;
    const int64_t padded = Padded(end);
    p.visible = Slots(piece.sequence, end, padded);
    p.written = p.visible.narrow(0, piece.first, piece.count);
    // Token i (position first + i) sees positions 0 .. first + i (never the
    // padding past `end`).
    p.allowed = torch::ones({piece.count, padded}, bool_options).tril(piece.first).view({1, 1, piece.count, padded});
    planned.push_back(std::move(p));
    offset += piece.count;
  }
  Step::Decodes decodes;
  if (!one_token.empty()) {
    // One host table, one copy to the device.
    DecodeTables tables = DecodeTablesOf(one_token);
    decodes.count = static_cast<int64_t>(one_token.size());
    decodes.longest = tables.longest;
    decodes.offsets = torch::tensor(decode_offsets, torch::kLong).to(options_.device);
    decodes.written = torch::tensor(tables.written, torch::kLong).to(options_.device);
    decodes.visible =
        torch::tensor(tables.visible, torch::kLong).view({decodes.count, decodes.longest}).to(options_.device);
    const torch::Tensor ends = torch::tensor(tables.ends, torch::kLong);
    if (options_.fused_decode_attention) {
      decodes.ends = ends.to(options_.device);
    } else {
      decodes.allowed = (torch::arange(decodes.longest, torch::kLong).unsqueeze(0) < ends.unsqueeze(1))
                            .view({decodes.count, 1, 1, decodes.longest})
                            .to(options_.device);
    }
  }
  return std::unique_ptr<Step>(new Step(*this, std::move(planned), std::move(decodes)));
}

std::unique_ptr<PagedKvCache::Step> PagedKvCache::DecodeStep(const torch::Tensor& written, const torch::Tensor& visible,
                                                             const torch::Tensor& ends) {
  Step::Decodes decodes;
  decodes.count = visible.size(0);
  decodes.longest = visible.size(1);
  const auto long_options = torch::TensorOptions().dtype(torch::kLong).device(visible.device());
  decodes.offsets = torch::arange(decodes.count, long_options);
  decodes.written = written;
  decodes.visible = visible;
  if (options_.fused_decode_attention) {
    decodes.ends = ends;
  } else {
    decodes.allowed = (torch::arange(decodes.longest, long_options).unsqueeze(0) < ends.unsqueeze(1))
                          .view({decodes.count, 1, 1, decodes.longest});
  }
  return std::unique_ptr<Step>(new Step(*this, {}, std::move(decodes)));
}

namespace {

// Key/value head j serves query heads j·g .. j·g + g - 1, as in the uncached
// forward: each head repeated in place along `head_axis`, as repeat_interleave
// does, but without its index tensor (nothing for a CUDA graph to trip on).
torch::Tensor WidenHeads(torch::Tensor seen, int64_t head_axis, int64_t heads, torch::ScalarType type) {
  seen = seen.to(type);
  const int64_t kv_heads = seen.size(head_axis);
  if (kv_heads == heads) return seen;
  std::vector<int64_t> sizes = seen.sizes().vec();
  sizes.insert(sizes.begin() + head_axis + 1, heads / kv_heads);
  return seen.unsqueeze(head_axis + 1).expand(sizes).flatten(head_axis, head_axis + 1);
}

}  // namespace

torch::Tensor PagedKvCache::Step::Attend(int64_t layer, const torch::Tensor& q, const torch::Tensor& k,
                                         const torch::Tensor& v) {
  const int64_t heads = q.size(1), kv_heads = k.size(1), head_dim = k.size(3);
  TORCH_CHECK(kv_heads == cache_.options_.kv_heads && head_dim == cache_.options_.head_dim,
              "the key/value cache holds ", cache_.options_.kv_heads, " heads of ", cache_.options_.head_dim,
              ", not ", kv_heads, " of ", head_dim);
  torch::Tensor& keys = cache_.keys_.at(layer);
  torch::Tensor& values = cache_.values_.at(layer);
  // [1, kv_heads, n, d] → [n, kv_heads, d], the pool's layout.
  const torch::Tensor step_keys = k.squeeze(0).transpose(0, 1).to(keys.scalar_type());
  const torch::Tensor step_values = v.squeeze(0).transpose(0, 1).to(values.scalar_type());
  if (decodes_.count > 0 && cache_.options_.fused_decode_attention) {
    // [1, heads, n, dim] → [n, heads, dim] and back: views, with no copy,
    // when every token of the step decodes (a decode step, or its graph).
    const bool only_decodes = pieces_.empty();
    auto decoding = [&](const torch::Tensor& t) { return only_decodes ? t : t.index_select(0, decodes_.offsets); };
    const torch::Tensor y = FusedDecodeAttention(decoding(q.squeeze(0).transpose(0, 1)), decoding(step_keys),
                                                 decoding(step_values), keys, values, decodes_.written,
                                                 decodes_.visible, decodes_.ends)
                                .transpose(0, 1)
                                .unsqueeze(0);
    if (only_decodes) return y;
    torch::Tensor out = torch::empty_like(q);
    out.index_copy_(2, decodes_.offsets, y);
    AttendPieces(q, step_keys, step_values, keys, values, out);
    return out;
  }
  torch::Tensor out = torch::empty_like(q);
  if (decodes_.count > 0) {
    keys.index_copy_(0, decodes_.written, step_keys.index_select(0, decodes_.offsets));
    values.index_copy_(0, decodes_.written, step_values.index_select(0, decodes_.offsets));
    // [d · longest, kv_heads, dim] → [d, heads, longest, dim].
    auto gather = [&](const torch::Tensor& pool) {
      torch::Tensor seen = pool.index_select(0, decodes_.visible.view({-1}))
                               .view({decodes_.count, decodes_.longest, kv_heads, head_dim})
                               .transpose(1, 2);
      return WidenHeads(seen, 1, heads, q.scalar_type());
    };
    // [1, heads, d, dim] → [d, heads, 1, dim] and back.
    torch::Tensor queries = q.index_select(2, decodes_.offsets).squeeze(0).transpose(0, 1).unsqueeze(2);
    torch::Tensor y = compat::MaskedAttention(queries, gather(keys), gather(values), decodes_.allowed);
    out.index_copy_(2, decodes_.offsets, y.squeeze(2).transpose(0, 1).unsqueeze(0));
  }
  AttendPieces(q, step_keys, step_values, keys, values, out);
  return out;
}

void PagedKvCache::Step::AttendPieces(const torch::Tensor& q, const torch::Tensor& step_keys,
                                      const torch::Tensor& step_values, torch::Tensor& keys, torch::Tensor& values,
                                      torch::Tensor& out) {
  const int64_t heads = q.size(1);
  for (const Piece& piece : pieces_) {
    keys.index_copy_(0, piece.written, step_keys.narrow(0, piece.offset, piece.count));
    values.index_copy_(0, piece.written, step_values.narrow(0, piece.offset, piece.count));
    // [L, kv_heads, d] → [1, heads, L, d].
    auto gather = [&](const torch::Tensor& pool) {
      return WidenHeads(pool.index_select(0, piece.visible).transpose(0, 1), 0, heads, q.scalar_type()).unsqueeze(0);
    };
    out.narrow(2, piece.offset, piece.count)
        .copy_(compat::MaskedAttention(q.narrow(2, piece.offset, piece.count), gather(keys), gather(values),
                                       piece.allowed));
  }
}

}  // namespace dslaunch::runtime
