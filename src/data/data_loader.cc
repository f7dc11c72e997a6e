// DataLoader: splits, per-epoch seeded permutations, batch assembly, state.
#include "data/data_loader.h"

#include <algorithm>
#include <cmath>
#include <random>

#include <nlohmann/json.hpp>

namespace tierflow {
namespace {

constexpr const char* kStateFormat = "tierflow.data_loader";
constexpr int kStateVersion = 1;

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Uniform in [0, bound) by rejection, so the result does not depend on a
// standard library's distribution code (which differs between libstdc++ and libc++).
uint64_t UniformBelow(std::mt19937_64& rng, uint64_t bound) {
  const uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound
  while (true) {
    const uint64_t r = rng();
    if (r >= threshold) return r % bound;
  }
}

std::string TokenCountMessage(const TokenSource& tokens, const DataLoaderOptions& o) {
  return "one micro-batch needs batch * seq_len + 1 = " +
         std::to_string(static_cast<int64_t>(o.batch) * o.seq_len + 1) + " tokens (batch " +
         std::to_string(o.batch) + ", seq_len " + std::to_string(o.seq_len) + ")";
}

// The settings both layouts need. Errors: InvalidArgument naming `name`.
Status CheckOptions(const std::string& name, const DataLoaderOptions& options) {
  if (options.batch <= 0 || options.seq_len <= 0) {
    return InvalidArgumentError(
        "data loader for " + name + ": batch and seq_len must be positive, got batch " +
        std::to_string(options.batch) + ", seq_len " + std::to_string(options.seq_len));
  }
  if (!(options.eval_fraction >= 0.0 && options.eval_fraction < 1.0)) {
    return InvalidArgumentError("data loader for " + name +
                                ": eval_fraction must be in [0, 1), got " +
                                std::to_string(options.eval_fraction));
  }
  return Status::Ok();
}

}  // namespace

StatusOr<DataLoader> DataLoader::Create(TokenSource tokens, const DataLoaderOptions& options) {
  const std::string& name = tokens.name();
  TF_RETURN_IF_ERROR(CheckOptions(name, options));
  const int64_t n = tokens.size();
  if (n == 0) return InvalidArgumentError(name + " has no tokens");
  const int64_t batch_tokens = static_cast<int64_t>(options.batch) * options.seq_len;
  if (n < batch_tokens + 1) {
    return InvalidArgumentError(name + " has " + std::to_string(n) + " tokens, but " +
                                TokenCountMessage(tokens, options) +
                                "; use a smaller batch or seq_len, or more data");
  }
  int64_t num_eval = 0;
  if (options.eval_fraction > 0) {
    num_eval = std::max<int64_t>(
        static_cast<int64_t>(std::ceil(options.eval_fraction * static_cast<double>(n))),
        batch_tokens + 1);
    if (n - num_eval < batch_tokens + 1) {
      return InvalidArgumentError(
          name + " has " + std::to_string(n) + " tokens; holding out " + std::to_string(num_eval) +
          " for evaluation (eval_fraction " + std::to_string(options.eval_fraction) +
          ", at least one micro-batch) leaves " + std::to_string(n - num_eval) +
          " to train on, but " + TokenCountMessage(tokens, options) +
          "; lower the eval fraction (0 turns the held-out split off), batch or seq_len, or add "
          "data");
    }
  }
  DataLoader d;
  d.tokens_ = std::move(tokens);
  d.options_ = options;
  d.num_train_tokens_ = n - num_eval;
  d.num_sequences_ = (d.num_train_tokens_ - 1) / options.seq_len;
  d.batches_per_epoch_ = d.num_sequences_ / options.batch;
  d.num_eval_batches_ = num_eval > 0 ? (num_eval - 1) / batch_tokens : 0;
  return d;
}

StatusOr<DataLoader> DataLoader::CreateFromRows(RowSet rows, const DataLoaderOptions& options) {
  const std::string name = rows.name();
  TF_RETURN_IF_ERROR(CheckOptions(name, options));
  if (rows.seq_len() != options.seq_len) {
    return InvalidArgumentError("data loader for " + name + ": the rows are " +
                                std::to_string(rows.seq_len()) + " tokens long but seq_len is " +
                                std::to_string(options.seq_len));
  }
  const int64_t n = rows.rows();
  const int64_t b = options.batch;
  const std::string need = "one micro-batch needs batch = " + std::to_string(b) + " rows";
  if (n < b) {
    return InvalidArgumentError(name + " makes " + std::to_string(n) + " rows (samples), but " +
                                need + "; use a smaller batch, or more data");
  }
  int64_t num_eval = 0;
  if (options.eval_fraction > 0) {
    num_eval = std::max<int64_t>(
        static_cast<int64_t>(std::ceil(options.eval_fraction * static_cast<double>(n))), b);
    if (n - num_eval < b) {
      return InvalidArgumentError(
          name + " makes " + std::to_string(n) + " rows; holding out " + std::to_string(num_eval) +
          " for evaluation (eval_fraction " + std::to_string(options.eval_fraction) +
          ", at least one micro-batch) leaves " + std::to_string(n - num_eval) +
          " to train on, but " + need +
          "; lower the eval fraction (0 turns the held-out split off) or batch, or add data");
    }
  }
  DataLoader d;
  d.options_ = options;
  d.num_sequences_ = n - num_eval;
  d.batches_per_epoch_ = d.num_sequences_ / b;
  d.num_eval_batches_ = num_eval / b;
  d.num_train_tokens_ = d.num_sequences_ * options.seq_len;
  d.rows_ = std::make_shared<const RowSet>(std::move(rows));
  return d;
}

const std::vector<int64_t>& DataLoader::OrderFor(int64_t epoch) {
  if (order_epoch_ == epoch) return order_;
  order_.resize(static_cast<size_t>(num_sequences_));
  for (int64_t i = 0; i < num_sequences_; ++i) order_[i] = i;
  if (options_.shuffle) {
    std::mt19937_64 rng(SplitMix64(options_.seed ^ SplitMix64(static_cast<uint64_t>(epoch))));
    for (int64_t i = num_sequences_ - 1; i > 0; --i) {
      const auto j = static_cast<int64_t>(UniformBelow(rng, static_cast<uint64_t>(i) + 1));
      std::swap(order_[i], order_[j]);
    }
  }
  order_epoch_ = epoch;
  return order_;
}

void DataLoader::FillRows(const int64_t* starts, TokenBatch* out) const {
  const int b = options_.batch;
  const int t = options_.seq_len;
  out->positions.clear();
  out->batch = b;
  out->seq_len = t;
  out->inputs.resize(static_cast<size_t>(b) * t);
  out->targets.resize(static_cast<size_t>(b) * t);
  std::vector<int32_t> row(static_cast<size_t>(t) + 1);
  for (int r = 0; r < b; ++r) {
    tokens_.Read(starts[r], t + 1, row.data());
    std::copy(row.begin(), row.end() - 1, out->inputs.begin() + static_cast<size_t>(r) * t);
    std::copy(row.begin() + 1, row.end(), out->targets.begin() + static_cast<size_t>(r) * t);
  }
}

void DataLoader::CopyRows(const int64_t* indices, TokenBatch* out) const {
  const int b = options_.batch;
  const size_t t = static_cast<size_t>(options_.seq_len);
  out->batch = b;
  out->seq_len = options_.seq_len;
  out->inputs.resize(b * t);
  out->targets.resize(b * t);
  out->positions.resize(rows_->packed() ? b * t : 0);
  for (int r = 0; r < b; ++r) {
    rows_->FillRow(indices[r], out->inputs.data() + r * t, out->targets.data() + r * t,
                   rows_->packed() ? out->positions.data() + r * t : nullptr);
  }
}

void DataLoader::TrainBatchAt(const DataPosition& position, TokenBatch* out) {
  const std::vector<int64_t>& order = OrderFor(position.epoch);
  if (rows_) {
    CopyRows(order.data() + position.index * options_.batch, out);
    return;
  }
  std::vector<int64_t> starts(static_cast<size_t>(options_.batch));
  for (int r = 0; r < options_.batch; ++r) {
    starts[r] = order[position.index * options_.batch + r] * options_.seq_len;
  }
  FillRows(starts.data(), out);
}

void DataLoader::Next(TokenBatch* out) {
  TrainBatchAt(position_, out);
  if (++position_.index == batches_per_epoch_) {
    position_.index = 0;
    ++position_.epoch;
  }
}

void DataLoader::EvalBatch(int64_t i, TokenBatch* out) const {
  if (rows_) {
    std::vector<int64_t> indices(static_cast<size_t>(options_.batch));
    for (int r = 0; r < options_.batch; ++r) indices[r] = num_sequences_ + i * options_.batch + r;
    CopyRows(indices.data(), out);
    return;
  }
  const int64_t batch_tokens = static_cast<int64_t>(options_.batch) * options_.seq_len;
  std::vector<int64_t> starts(static_cast<size_t>(options_.batch));
  for (int r = 0; r < options_.batch; ++r) {
    starts[r] = num_train_tokens_ + i * batch_tokens + static_cast<int64_t>(r) * options_.seq_len;
  }
  FillRows(starts.data(), out);
}

Status DataLoader::Seek(const DataPosition& position) {
  if (position.epoch < 0 || position.index < 0 || position.index >= batches_per_epoch_) {
    return InvalidArgumentError("data position (epoch " + std::to_string(position.epoch) +
                                ", index " + std::to_string(position.index) + ") is outside the " +
                                std::to_string(batches_per_epoch_) +
                                " micro-batches of an epoch of " + DataName());
  }
  position_ = position;
  return Status::Ok();
}

nlohmann::json DataLoader::SaveState() const {
  return nlohmann::json{{"format", kStateFormat},      {"version", kStateVersion},
                        {"epoch", position_.epoch},    {"index", position_.index},
                        {"shuffle", options_.shuffle}, {"seed", options_.seed},
                        {"batch", options_.batch},     {"seq_len", options_.seq_len},
                        {"num_tokens", NumTokens()},   {"num_train_tokens", num_train_tokens_}};
}

Status DataLoader::RestoreState(const nlohmann::json& state) {
  const auto bad = [](const std::string& why) {
    return InvalidArgumentError("data loader state: " + why);
  };
  if (!state.is_object())
    return bad("expected a JSON object, got a " + std::string(state.type_name()));
  auto format = state.find("format");
  if (format == state.end() || !format->is_string() || format->get<std::string>() != kStateFormat) {
    return bad("\"format\" is not \"" + std::string(kStateFormat) + "\"");
  }
  const auto integer = [&](const char* key, int64_t* out) -> Status {
    auto it = state.find(key);
    if (it == state.end() || !it->is_number_integer())
      return bad(std::string(key) + " is missing or not an integer");
    *out = it->get<int64_t>();
    return Status::Ok();
  };
  int64_t version, epoch, index, batch, seq_len, num_tokens, num_train_tokens;
  TF_RETURN_IF_ERROR(integer("version", &version));
  if (version != kStateVersion)
    return bad("version " + std::to_string(version) + " is not the supported 1");
  TF_RETURN_IF_ERROR(integer("epoch", &epoch));
  TF_RETURN_IF_ERROR(integer("index", &index));
  TF_RETURN_IF_ERROR(integer("batch", &batch));
  TF_RETURN_IF_ERROR(integer("seq_len", &seq_len));
  TF_RETURN_IF_ERROR(integer("num_tokens", &num_tokens));
  TF_RETURN_IF_ERROR(integer("num_train_tokens", &num_train_tokens));
  auto shuffle = state.find("shuffle");
  auto seed = state.find("seed");
  if (shuffle == state.end() || !shuffle->is_boolean())
    return bad("\"shuffle\" is missing or not a boolean");
  if (seed == state.end() || !seed->is_number_unsigned()) {
    return bad("\"seed\" is missing or not a non-negative integer");
  }

  const auto mismatch = [&](const char* what, const std::string& saved, const std::string& now) {
    return FailedPreconditionError(
        "data loader state was saved with " + std::string(what) + " " + saved +
        " but this run has " + now + " (" + DataName() +
        "); resume with the same data and data options, or start a new run");
  };
  if (batch != options_.batch)
    return mismatch("batch", std::to_string(batch), std::to_string(options_.batch));
  if (seq_len != options_.seq_len) {
    return mismatch("seq_len", std::to_string(seq_len), std::to_string(options_.seq_len));
  }
  if (shuffle->get<bool>() != options_.shuffle) {
    return mismatch("shuffle", shuffle->get<bool>() ? "on" : "off",
                    options_.shuffle ? "on" : "off");
  }
  if (seed->get<uint64_t>() != options_.seed) {
    return mismatch("seed", std::to_string(seed->get<uint64_t>()), std::to_string(options_.seed));
  }
  if (num_tokens != NumTokens()) {
    return mismatch("a dataset of", std::to_string(num_tokens) + " tokens",
                    std::to_string(NumTokens()));
  }
  if (num_train_tokens != num_train_tokens_) {
    return mismatch("a train split of", std::to_string(num_train_tokens) + " tokens",
                    std::to_string(num_train_tokens_) + " (another eval fraction?)");
  }
  return Seek({epoch, index});
}

}  // namespace tierflow
