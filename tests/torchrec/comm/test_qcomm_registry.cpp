// QCommsConfig -> codecs, the registry's keys and fallbacks, the enum names, and
// the per-codec telemetry.
#include <ferry/collectives/torchrec/torchrec.h>

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>

using namespace ferry;
using namespace ferry::torchrec;
using Catch::Matchers::Contains;

namespace {

const FbgemmQuantizedCommCodec& fbgemm(const std::shared_ptr<QuantizedCommCodec>& codec) {
  const auto* c = dynamic_cast<const FbgemmQuantizedCommCodec*>(codec.get());
  REQUIRE(c != nullptr);
  return *c;
}

CommType precision(const std::shared_ptr<QuantizedCommCodec>& codec) {
  return fbgemm(codec).comm_precision();
}

}  // namespace

TEST_CASE("enum names: CommType, CommOp", "[registry]") {
  CHECK(std::string(comm_type_name(CommType::BF16)) == "bf16");
  CHECK(comm_type_from_name("INT8") == CommType::INT8);
  CHECK_THROWS_WITH(comm_type_from_name("fp4"), Contains("fp32, fp16, bf16, fp8, int8, mx4"));
  CHECK(std::string(comm_op_name(CommOp::POOLED_EMBEDDINGS_REDUCE_SCATTER)) ==
        "POOLED_EMBEDDINGS_REDUCE_SCATTER");
  CHECK(std::string(comm_op_value(CommOp::SEQUENCE_EMBEDDINGS_ALL_TO_ALL)) ==
        "sequence_embeddings_all_to_all");
  CHECK(comm_op_from_name("pooled_embeddings_all_to_all") == CommOp::POOLED_EMBEDDINGS_ALL_TO_ALL);
  CHECK_THROWS_AS(comm_op_from_name("ALL_REDUCE"), InvalidArgument);
}

TEST_CASE("get_qcomm_codecs: precisions, FP8 row dims and layouts", "[registry]") {
  const QuantizedCommCodecs none = get_qcomm_codecs(std::nullopt);
  CHECK(none.forward->name() == "no-op");
  // An FP32 config makes FP32 codecs, not no-op ones.
  const QuantizedCommCodecs fp32 = get_qcomm_codecs(QCommsConfig{});
  CHECK(precision(fp32.forward) == CommType::FP32);

  QCommsConfig config;
  config.forward_precision = CommType::FP8;
  config.backward_precision = CommType::FP8;
  config.fp8_quantize_dim = 32;  // no fp8_quantize_dim_bwd: __post_init__ copies it
  QuantizedCommCodecs codecs = get_qcomm_codecs(config);
  CHECK(fbgemm(codecs.forward).row_dim() == 32);
  CHECK(fbgemm(codecs.forward).is_fwd());
  CHECK(fbgemm(codecs.backward).row_dim() == 32);
  CHECK_FALSE(fbgemm(codecs.backward).is_fwd());  // 1-5-2
  CHECK(codecs.backward->name() == "fp8 rowwise 1-5-2 (row_dim 32)");
  CHECK(codecs.backward->describe() == "fp8 rowwise 1-5-2 (row_dim 32) [backward]");

  config.fp8_quantize_dim_bwd = 64;
  config.fp8_bwd_uses_143 = true;
  codecs = get_qcomm_codecs(config);
  CHECK(fbgemm(codecs.backward).row_dim() == 64);
  CHECK(fbgemm(codecs.backward).is_fwd());

  // INT8 never takes the FP8 dims (it keeps the context default 32) nor a loss scale.
  config = QCommsConfig(CommType::FP8, CommType::INT8);
  config.backward_loss_scale = 4.0;
  config.fp8_quantize_dim = 16;
  config.fp8_quantize_dim_bwd = 16;
  codecs = get_qcomm_codecs(config);
  CHECK(fbgemm(codecs.forward).row_dim() == 16);
  CHECK(fbgemm(codecs.backward).row_dim() == -1);
  CHECK(codecs.backward->create_context()->row_dim == 32);
  CHECK_FALSE(fbgemm(codecs.backward).loss_scale().has_value());
  config.forward_precision = CommType::FP16;
  config.forward_loss_scale = 128.0;
  CHECK(fbgemm(get_qcomm_codecs(config).forward).loss_scale() == 128.0);
}

TEST_CASE("get_qcomm_codecs_registry: keys and the per-comm fallbacks", "[registry]") {
  CHECK_FALSE(get_qcomm_codecs_registry(QCommsConfig{}).has_value());

  QCommsConfig config;
  config.forward_precision = CommType::FP8;
  config.backward_precision = CommType::MX4;
  const auto rs = get_qcomm_codecs_registry(config, {{CommOp::POOLED_EMBEDDINGS_REDUCE_SCATTER}});
  REQUIRE(rs.has_value());
  REQUIRE(rs->size() == 1);
  const QuantizedCommCodecs& rsc = rs->at("POOLED_EMBEDDINGS_REDUCE_SCATTER");
  CHECK(precision(rsc.forward) == CommType::FP16);
  CHECK(precision(rsc.backward) == CommType::BF16);
  CHECK(rsc.forward->telemetry().label() == "POOLED_EMBEDDINGS_REDUCE_SCATTER/forward");
  // MX4 outside reduce-scatter has no codec in ferry: the error names the op.
  CHECK_THROWS_WITH(get_qcomm_codecs_registry(config),
                    Contains("POOLED_EMBEDDINGS_ALL_TO_ALL") && Contains("mx4 is not provided"));

  config.backward_precision = CommType::BF16;
  const auto all = get_qcomm_codecs_registry(config);
  REQUIRE(all.has_value());
  CHECK(all->size() == 3);
  CHECK(precision(all->at("POOLED_EMBEDDINGS_ALL_TO_ALL").forward) == CommType::FP8);
  CHECK(precision(all->at("SEQUENCE_EMBEDDINGS_ALL_TO_ALL").backward) == CommType::BF16);
  CHECK(precision(all->at("POOLED_EMBEDDINGS_REDUCE_SCATTER").forward) == CommType::FP16);
  // Every entry has codecs of its own (their telemetry is per op and direction).
  CHECK(all->at("POOLED_EMBEDDINGS_ALL_TO_ALL").forward !=
        all->at("SEQUENCE_EMBEDDINGS_ALL_TO_ALL").forward);

  // CPU: BF16 -> FP16 in both directions (gloo); "cuda" keeps BF16.
  config = QCommsConfig(CommType::BF16, CommType::BF16);
  const auto cpu = get_qcomm_codecs_registry(config, std::nullopt, "cpu");
  for (const auto& [op, codecs] : *cpu) {
    CHECK(precision(codecs.forward) == CommType::FP16);
    CHECK(precision(codecs.backward) == CommType::FP16);
  }
  const auto cuda = get_qcomm_codecs_registry(config, std::nullopt, "cuda:1");
  CHECK(precision(cuda->at("POOLED_EMBEDDINGS_REDUCE_SCATTER").backward) == CommType::BF16);
  CHECK_THROWS_WITH(get_qcomm_codecs_registry(config, std::nullopt, "tpu"),
                    Contains("given \"tpu\""));
  // An empty op list is an empty registry, not none.
  const auto empty = get_qcomm_codecs_registry(config, std::vector<CommOp>{});
  REQUIRE(empty.has_value());
  CHECK(empty->empty());
}

TEST_CASE("telemetry: relative error of the last encode and its running maximum", "[telemetry]") {
  QCommsConfig config(CommType::FP16, CommType::INT8);
  auto registry = get_qcomm_codecs_registry(config, {{CommOp::POOLED_EMBEDDINGS_ALL_TO_ALL}});
  QuantizedCommCodecs& codecs = registry->at("POOLED_EMBEDDINGS_ALL_TO_ALL");
  CodecTelemetry& t = codecs.forward->telemetry();

  // Disabled by default (FERRY_DEBUG is not set for the tests): nothing is measured.
  const Tensor exact = ferry::tensor<float>({0.5f, -2.0f, 1024.0f});
  codecs.forward->encode(exact);
  if (!t.enabled()) CHECK(t.stats().calls == 0);

  t.set_enabled(true);
  t.reset();
  codecs.forward->encode(exact);  // representable in fp16: no error
  CHECK(t.stats().calls == 1);
  CHECK(t.stats().last_relative_error == 0.0);
  CHECK(t.stats().last_numel == 3);
  // 0.1 -> 0.0999755859375 and 3 exact: error |d| / sqrt(0.1^2 + 9), computed in double.
  codecs.forward->encode(ferry::tensor<float>({0.1f, 3.0f}));
  const double d = 0.0999755859375 - static_cast<double>(0.1f);
  const double expected = std::fabs(d) / std::sqrt(static_cast<double>(0.1f) * 0.1f + 9.0);
  CHECK(t.stats().last_relative_error == Approx(expected).epsilon(1e-12));
  codecs.forward->encode(exact);
  const CodecErrorStats s = t.stats();
  CHECK(s.calls == 3);
  CHECK(s.last_relative_error == 0.0);
  CHECK(s.max_relative_error == Approx(expected).epsilon(1e-12));
  // Clamping a finite value is an error; inputs that are not finite are left out.
  t.reset();
  codecs.forward->encode(ferry::tensor<float>({70000.0f, std::numeric_limits<float>::quiet_NaN()}));
  CHECK(t.stats().last_relative_error == Approx(4496.0 / 70000.0));

  // The backward codec keeps its own record; INT8 row-wise on 2 rows of 32.
  CodecTelemetry& tb = codecs.backward->telemetry();
  tb.set_enabled(true);
  QuantizationContext ctx = *codecs.backward->create_context();
  const Tensor g = normal({64}, 0.0, 1.0, 3);
  const Tensor wire = codecs.backward->encode(g, &ctx);
  CHECK(ctx.row_dim_quant == 40);  // encode's own writes survive the measurement
  CHECK(tb.stats().calls == 1);
  CHECK(tb.stats().last_relative_error > 0.0);
  CHECK(tb.stats().last_relative_error < 0.02);
  CHECK(tb.stats().last_relative_error ==
        Approx(relative_error(g, codecs.backward->decode(wire, &ctx))));
  CHECK(t.stats().calls == 1);
}

TEST_CASE("relative_error: definition and edge cases", "[telemetry]") {
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(relative_error(ferry::tensor<float>({3, 4}), ferry::tensor<float>({3, 4})) == 0.0);
  CHECK(relative_error(ferry::tensor<float>({3, 4}), ferry::tensor<double>({3, 5})) ==
        Approx(0.2));
  CHECK(relative_error(ferry::tensor<float>({0, 0}), ferry::tensor<float>({0, 0})) == 0.0);
  CHECK(std::isinf(relative_error(ferry::tensor<float>({0, 0}), ferry::tensor<float>({0, 1}))));
  CHECK(std::isinf(relative_error(ferry::tensor<float>({1, 2}), ferry::tensor<float>({inf, 2}))));
  CHECK(relative_error(ferry::tensor<float>({inf, 2}), ferry::tensor<float>({1, 2})) == 0.0);
  CHECK_THROWS_AS(relative_error(ferry::tensor<float>({1}), ferry::tensor<float>({1, 2})),
                  InvalidArgument);
}
