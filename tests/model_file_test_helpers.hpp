#pragma once
// Shared pieces of the model-file tests (test_train, test_interop): the model two files describe.
#include <dpk/io/model_file.hpp>

#include <doctest/doctest.h>

#include <cstddef>

namespace dpk_test {

/// The two files describe the same model: precision, types, descriptor and fitting
/// hyperparameters, and the same tensor table (names, shapes, offsets). Values are not compared.
inline void check_same_model_layout(dpk::ModelFileData const& a, dpk::ModelFileData const& b) {
  CHECK(a.precision == b.precision);
  CHECK(a.ntypes == b.ntypes);
  CHECK(a.type_map == b.type_map);
  CHECK(a.descriptor.sel == b.descriptor.sel);
  CHECK(a.descriptor.rcut == b.descriptor.rcut);
  CHECK(a.descriptor.rcut_smth == b.descriptor.rcut_smth);
  CHECK(a.descriptor.neuron == b.descriptor.neuron);
  CHECK(a.descriptor.axis_neuron == b.descriptor.axis_neuron);
  CHECK(a.descriptor.type_one_side == b.descriptor.type_one_side);
  CHECK(a.descriptor.resnet_dt == b.descriptor.resnet_dt);
  CHECK(a.fitting.neuron == b.fitting.neuron);
  CHECK(a.fitting.resnet_dt == b.fitting.resnet_dt);
  REQUIRE(a.tensors.size() == b.tensors.size());
  for (std::size_t i = 0; i < a.tensors.size(); ++i) {
    CHECK(a.tensors[i].name == b.tensors[i].name);
    CHECK(a.tensors[i].shape == b.tensors[i].shape);
    CHECK(a.tensors[i].offset == b.tensors[i].offset);
  }
}

}  // namespace dpk_test
