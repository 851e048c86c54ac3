// T5 architecture presets and parameter counting, without LibTorch.
//
// The presets are T5X's published configurations; the parameter counts of the
// real model (model/ proper, built on LibTorch) must equal CountParameters of
// its config, which is what makes these counts a check of the architecture.
// This library is deliberately tensor-free so that job validation and the CLI
// can use it without linking LibTorch.
//
// Thread-safety: all functions are pure and thread-safe.
#ifndef TRAINYARD_SPEC_PRESETS_H_
#define TRAINYARD_SPEC_PRESETS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/job.pb.h"

namespace trainyard {

// Names of all presets, in a stable order (smallest first within a family).
const std::vector<std::string>& PresetNames();

// The full config of a preset (every field set), or kNotFound naming the
// allowed presets.
absl::StatusOr<ModelConfig> PresetConfig(absl::string_view name);

// The effective config of a model spec: the preset's (with the spec's
// dropout override), or the explicit config with defaults filled in.
absl::StatusOr<ModelConfig> ResolveModelConfig(const ModelSpec& spec);

// Fills the defaults of an explicit config (buckets, distance, dropout, eps,
// feed-forward kind) where fields are unset.
void FillModelConfigDefaults(ModelConfig* config);

// Number of trainable parameters of a T5 with this config, in closed form.
int64_t CountParameters(const ModelConfig& config);

// Model FLOPs of one example's forward pass at these lengths, as the PaLM
// paper's appendix counts them (training = 3x; the matrix products, with
// attention scores and their weighted sum in full): with d = d_model,
// h*q = heads*d_kv, f = d_ff (x3/2 for the gated MLP's two input
// projections), V = vocabulary, I/T = input/target lengths, Le/Ld =
// encoder/decoder layers,
//   forward = 2*T*d*V                                     (output projection)
//           + 2*I*Le*(4*d*h*q + 3*d*f or 2*d*f)            (encoder layers)
//           + 2*T*Ld*(8*d*h*q + 3*d*f or 2*d*f)            (decoder layers)
//           + 4*h*q*(Le*I*I + Ld*(T*T + T*I))              (attention)
double ForwardFlopsPerExample(const ModelConfig& config, int64_t inputs, int64_t targets);

}  // namespace trainyard

#endif  // TRAINYARD_SPEC_PRESETS_H_
