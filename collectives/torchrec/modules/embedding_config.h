// ferry::torchrec embedding table configs: torchrec's EmbeddingBagConfig / EmbeddingConfig
// (torchrec.modules.embedding_configs), their validation and a deterministic initialisation.
//
//   EmbeddingBagConfig t{.name = "t0", .num_embeddings = 100, .embedding_dim = 8,
//                        .feature_names = {"f0", "f1"}, .pooling = PoolingType::Mean};
//
// One table may serve several features (each looked up and pooled separately); a feature
// belongs to at most one table of a collection; table names are unique in a collection.
// data_type is float32 or float64 (the table's and its optimizer state's dtype).
//
// Initialisation: uniform in [weight_init_min, weight_init_max) from a seed. When the bounds are
// not given they are torchrec's defaults, -+sqrt(1 / num_embeddings). The seed of a table is
// mixed from the collection's seed and the table's name (not its position), so a table's initial
// weights do not depend on which other tables share its collection, and a sharded collection can
// build the same full table and cut its shards out of it.
#pragma once

#include <ferry/runtime/tensor.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ferry::torchrec {

enum class PoolingType { Sum, Mean };
const char* pooling_type_name(PoolingType p);  // "SUM", "MEAN"

struct EmbeddingBagConfig {
  std::string name{};
  int64_t num_embeddings = 0;
  int64_t embedding_dim = 0;
  std::vector<std::string> feature_names{};
  PoolingType pooling = PoolingType::Sum;
  std::optional<double> weight_init_min{};  // default -sqrt(1 / num_embeddings)
  std::optional<double> weight_init_max{};  // default +sqrt(1 / num_embeddings)
  DType data_type = DType::Float32;         // float32 or float64
};

// The same without pooling (an EmbeddingCollection's tables).
struct EmbeddingConfig {
  std::string name{};
  int64_t num_embeddings = 0;
  int64_t embedding_dim = 0;
  std::vector<std::string> feature_names{};
  std::optional<double> weight_init_min{};
  std::optional<double> weight_init_max{};
  DType data_type = DType::Float32;
};

// Checks one table: non-empty name, num_embeddings >= 1, embedding_dim >= 1, at least one
// feature, no feature listed twice, data_type float32/float64, init bounds finite and min <= max.
// Throws InvalidArgument "<where>: table \"t\": ...".
void validate_table(const EmbeddingBagConfig& c, const char* where);
void validate_table(const EmbeddingConfig& c, const char* where);
// A whole collection: every table valid, table names unique, a feature in at most one table;
// for EmbeddingConfig lists also a single embedding_dim (torchrec's EmbeddingCollection).
void validate_tables(const std::vector<EmbeddingBagConfig>& tables, const char* where);
void validate_tables(const std::vector<EmbeddingConfig>& tables, const char* where);

// The table's init bounds with torchrec's defaults filled in.
double init_min(const EmbeddingBagConfig& c);
double init_max(const EmbeddingBagConfig& c);
// A table's seed: `seed` mixed with the table's name (splitmix64 over FNV-1a of the name).
uint64_t table_seed(uint64_t seed, const std::string& table_name);
// The full table [num_embeddings, embedding_dim] of data_type, uniform from table_seed(seed, name).
Tensor init_table_weight(const EmbeddingBagConfig& c, uint64_t seed);
Tensor init_table_weight(const EmbeddingConfig& c, uint64_t seed);

// An EmbeddingConfig as the bag config of the same table (pooling unused); lets one code path
// serve both collections.
EmbeddingBagConfig as_bag_config(const EmbeddingConfig& c);

}  // namespace ferry::torchrec
