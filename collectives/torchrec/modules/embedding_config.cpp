#include <ferry/collectives/torchrec/modules/embedding_config.h>

#include <ferry/runtime/error.h>

#include <cmath>
#include <map>
#include <set>

namespace ferry::torchrec {

const char* pooling_type_name(PoolingType p) { return p == PoolingType::Sum ? "SUM" : "MEAN"; }

EmbeddingBagConfig as_bag_config(const EmbeddingConfig& c) {
  EmbeddingBagConfig b;
  b.name = c.name;
  b.num_embeddings = c.num_embeddings;
  b.embedding_dim = c.embedding_dim;
  b.feature_names = c.feature_names;
  b.weight_init_min = c.weight_init_min;
  b.weight_init_max = c.weight_init_max;
  b.data_type = c.data_type;
  return b;
}

double init_min(const EmbeddingBagConfig& c) {
  return c.weight_init_min ? *c.weight_init_min
                           : -std::sqrt(1.0 / static_cast<double>(c.num_embeddings));
}
double init_max(const EmbeddingBagConfig& c) {
  return c.weight_init_max ? *c.weight_init_max
                           : std::sqrt(1.0 / static_cast<double>(c.num_embeddings));
}

void validate_table(const EmbeddingBagConfig& c, const char* where) {
  FERRY_CHECK(!c.name.empty(), InvalidArgument, where, ": a table has an empty name");
  const std::string t = ferry::detail::str(where, ": table \"", c.name, "\": ");
  FERRY_CHECK(c.num_embeddings >= 1, InvalidArgument, t, "num_embeddings must be >= 1, got ",
              c.num_embeddings);
  FERRY_CHECK(c.embedding_dim >= 1, InvalidArgument, t, "embedding_dim must be >= 1, got ",
              c.embedding_dim);
  FERRY_CHECK(!c.feature_names.empty(), InvalidArgument, t, "no feature_names");
  std::set<std::string> seen;
  for (const auto& f : c.feature_names) {
    FERRY_CHECK(!f.empty(), InvalidArgument, t, "an empty feature name");
    FERRY_CHECK(seen.insert(f).second, InvalidArgument, t, "feature \"", f, "\" listed twice");
  }
  FERRY_CHECK(c.data_type == DType::Float32 || c.data_type == DType::Float64, InvalidArgument, t,
              "data_type must be float32 or float64, got ", dtype_name(c.data_type));
  const double lo = init_min(c), hi = init_max(c);
  FERRY_CHECK(std::isfinite(lo) && std::isfinite(hi) && lo <= hi, InvalidArgument, t,
              "weight_init_min (", lo, ") must be <= weight_init_max (", hi, "), both finite");
}

void validate_table(const EmbeddingConfig& c, const char* where) {
  validate_table(as_bag_config(c), where);
}

namespace {

template <class C>
void validate_all(const std::vector<C>& tables, const char* where) {
  std::set<std::string> names;
  std::map<std::string, std::string> owner;  // feature -> table
  for (const auto& c : tables) {
    validate_table(c, where);
    FERRY_CHECK(names.insert(c.name).second, InvalidArgument, where, ": table name \"", c.name,
                "\" is used by two tables (table names must be unique)");
    for (const auto& f : c.feature_names) {
      auto [it, inserted] = owner.emplace(f, c.name);
      FERRY_CHECK(inserted, InvalidArgument, where, ": feature \"", f, "\" is in table \"",
                  it->second, "\" and in table \"", c.name,
                  "\" (a feature belongs to at most one table)");
    }
  }
}

}  // namespace

void validate_tables(const std::vector<EmbeddingBagConfig>& tables, const char* where) {
  validate_all(tables, where);
}

void validate_tables(const std::vector<EmbeddingConfig>& tables, const char* where) {
  validate_all(tables, where);
  for (const auto& c : tables) {
    FERRY_CHECK(c.embedding_dim == tables.front().embedding_dim, InvalidArgument, where,
                ": all tables must have the same embedding_dim, but table \"",
                tables.front().name, "\" has ", tables.front().embedding_dim, " and table \"",
                c.name, "\" has ", c.embedding_dim);
  }
}

uint64_t table_seed(uint64_t seed, const std::string& table_name) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char ch : table_name) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  uint64_t z = seed ^ h;  // splitmix64 finaliser
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

Tensor init_table_weight(const EmbeddingBagConfig& c, uint64_t seed) {
  validate_table(c, "init_table_weight");
  return uniform({c.num_embeddings, c.embedding_dim}, init_min(c), init_max(c),
                 table_seed(seed, c.name), c.data_type);
}

Tensor init_table_weight(const EmbeddingConfig& c, uint64_t seed) {
  return init_table_weight(as_bag_config(c), seed);
}

}  // namespace ferry::torchrec
