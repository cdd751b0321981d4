#pragma once
// Shared by bench_model.cpp and bench_compress.cpp: the hyperparameters of DeePMD-kit's water
// example model (examples/water/se_e2_a/input.json): sel [46, 92], rcut 6, rcut_smth 0.5,
// embedding [25, 50, 100], axis_neuron 16, type_one_side, fitting [240, 240, 240] with resnet_dt.
#include <dpk/model/config.hpp>

namespace dpk_bench {

/// The water example's descriptor.
inline dpk::DescriptorConfig water_descriptor() {
  dpk::DescriptorConfig d;
  d.sel = {46, 92};
  d.rcut = 6.0;
  d.rcut_smth = 0.5;
  d.neuron = {25, 50, 100};
  d.axis_neuron = 16;
  d.type_one_side = true;
  return d;
}

/// The water example's fitting net.
inline dpk::FittingConfig water_fitting() {
  dpk::FittingConfig f;
  f.neuron = {240, 240, 240};
  f.resnet_dt = true;
  return f;
}

}  // namespace dpk_bench
