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

/// The tables of a compressed model file as the model takes them.
inline EmbeddingTableData embedding_table_data(ModelCompression const& c) {
  EmbeddingTableData t;
  t.step = c.step;
  t.extrapolate = c.extrapolate;
  t.m1 = c.m1;
  std::size_t at = 0;
  for (auto const& n : c.nets) {
    TableRange r;
    r.lower = n.lower;
    r.upper = n.upper;
    r.max = n.max;
    r.first_intervals = n.first_intervals;
    r.second_intervals = n.second_intervals;
    std::size_t const size = std::size_t(r.intervals()) * 6 * std::size_t(c.m1);
    require(at + size <= c.table.size(), "compressed model: the table block is shorter than its ranges");
    t.coefficients.emplace_back(c.table.begin() + std::ptrdiff_t(at), c.table.begin() + std::ptrdiff_t(at + size));
    t.ranges.push_back(r);
    at += size;
  }
  return t;
}

/// A model file's compression section from tables built for the smallest neighbour distance `rmin`.
inline ModelCompression model_compression(EmbeddingTableData const& t, double rmin, long check_frequency) {
  ModelCompression c;
  c.step = t.step;
  c.extrapolate = t.extrapolate;
  c.min_neighbor_distance = rmin;
  c.check_frequency = check_frequency;
  c.m1 = t.m1;
  for (int k = 0; k < t.nnets(); ++k) {
    auto const& r = t.ranges[std::size_t(k)];
    c.nets.push_back({r.lower, r.upper, r.max, r.first_intervals, r.second_intervals});
    c.table.insert(c.table.end(), t.coefficients[std::size_t(k)].begin(), t.coefficients[std::size_t(k)].end());
  }
  return c;
}

/// Builds the EnergyModel that `data` describes (its descriptor, fitting net and ntypes) and
/// installs its parameters, statistics and energy bias (and, for a compressed model, its
/// embedding tables: the model then evaluates the tables, docs/compression.md), in precision `Scalar` whatever precision
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
  if (data.compression) model->set_embedding_table(embedding_table_data(*data.compression));
  return model;
}

}  // namespace dpk
