#pragma once
/// \file load_model.hpp
/// \brief An EnergyModel built from the contents of a dpk model or checkpoint file
/// (docs/model-format.md): hyperparameters, parameters, statistics and energy bias.

#include <dpk/core/error.hpp>
#include <dpk/io/model_file.hpp>
#include <dpk/model/energy_model.hpp>

#include <memory>
#include <string>

namespace dpk {

/// Builds the EnergyModel that `data` describes (its descriptor, fitting net and ntypes) and
/// installs its parameters, statistics and energy bias, in precision `Scalar` whatever precision
/// the file was trained in. `file` names the source in errors. Throws dpk::Error when the
/// file's tensor table differs from the layout dpk builds for those hyperparameters.
template <class Scalar, class ExecutionSpace>
std::unique_ptr<EnergyModel<Scalar, ExecutionSpace>> load_energy_model(ModelFileData const& data,
                                                                        std::string const& file) {
  auto model = std::make_unique<EnergyModel<Scalar, ExecutionSpace>>(data.descriptor, data.fitting, data.ntypes);
  auto const& tensors = model->tensors();
  require(data.tensors.size() == tensors.size() && data.parameters.size() == model->num_parameters(),
          "model file '" + file + "' has " + std::to_string(data.parameters.size()) + " parameters in " +
              std::to_string(data.tensors.size()) + " tensors; its descriptor/fitting_net settings give " +
              std::to_string(model->num_parameters()) + " in " + std::to_string(tensors.size()));
  for (std::size_t i = 0; i < tensors.size(); ++i)
    require(data.tensors[i].name == tensors[i].name && data.tensors[i].shape == tensors[i].shape &&
                data.tensors[i].offset == tensors[i].offset,
            "model file '" + file + "': tensor '" + data.tensors[i].name + "' does not match the layout's '" +
                tensors[i].name + "' (name, shape or offset)");
  model->set_parameters(data.parameters);
  model->set_statistics(data.avg, data.stdev);
  model->set_energy_bias(data.energy_bias);
  return model;
}

}  // namespace dpk
