#pragma once
/// \file load_model.hpp
/// \brief The contents of a dpk model or checkpoint file (docs/model-format.md) put into an
/// EnergyModel: install_model_data checks the file against the model and installs its
/// parameters, statistics, energy bias and tables; load_energy_model builds the model first.

#include <dpk/core/error.hpp>
#include <dpk/io/model_file.hpp>
#include <dpk/model/energy_model.hpp>

#include <cstddef>
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

/// What install_model_data does with the embedding tables of a compressed model file.
enum class ModelTables {
  install,  ///< install them: the model evaluates the tables (docs/compression.md)
  ignore    ///< leave them out: the model evaluates its embedding nets (dpk-train --init-model)
};

namespace detail::load_model {

/// "'name' shape [a, b] at offset o", for errors.
inline std::string describe(TensorInfo const& t) {
  std::string text = "'" + t.name + "' shape [";
  for (std::size_t k = 0; k < t.shape.size(); ++k) text += (k ? ", " : "") + std::to_string(t.shape[k]);
  return text + "] at offset " + std::to_string(t.offset);
}

}  // namespace detail::load_model

/// Installs the parameters, statistics and energy bias of `data` (read from `file`) into
/// `model`, then, when `tables` is ModelTables::install and the file is a compressed model, its
/// embedding tables. The one place that checks a file against a model: its type count, its
/// tensor table (every tensor's name, shape and offset, in order, as model.tensors() lists
/// them), its parameter count and the size of its statistics and bias. Throws dpk::Error naming
/// `file` and what differs.
template <class Scalar, class ExecutionSpace>
void install_model_data(ModelFileData const& data, EnergyModel<Scalar, ExecutionSpace>& model, std::string const& file,
                        ModelTables tables = ModelTables::install) {
  std::string const source = "model file '" + file + "'";
  require(data.ntypes == model.ntypes(), source + " has " + std::to_string(data.ntypes) + " types, the model has " +
                                             std::to_string(model.ntypes()));
  auto const& tensors = model.tensors();
  require(data.tensors.size() == tensors.size() && data.parameters.size() == model.num_parameters(),
          source + " has " + std::to_string(data.parameters.size()) + " parameters in " +
              std::to_string(data.tensors.size()) + " tensors; the model's descriptor/fitting_net settings give " +
              std::to_string(model.num_parameters()) + " in " + std::to_string(tensors.size()));
  for (std::size_t i = 0; i < tensors.size(); ++i)
    require(data.tensors[i] == tensors[i],
            source + ": tensor " + std::to_string(i) + " " + detail::load_model::describe(data.tensors[i]) +
                " does not match the model's " + detail::load_model::describe(tensors[i]) +
                " (different descriptor/fitting_net settings?)");
  std::size_t const nstats = std::size_t(model.ntypes()) * std::size_t(model.descriptor().nnei()) * 4;
  require(data.avg.size() == nstats && data.stdev.size() == nstats,
          source + " has statistics avg/std of " + std::to_string(data.avg.size()) + "/" +
              std::to_string(data.stdev.size()) + " values; the model needs ntypes x nnei x 4 = " +
              std::to_string(nstats) + " (nnei " + std::to_string(model.descriptor().nnei()) +
              ": different descriptor.sel?)");
  require(data.energy_bias.size() == std::size_t(model.ntypes()),
          source + " has " + std::to_string(data.energy_bias.size()) + " energy bias values, the model " +
              std::to_string(model.ntypes()) + " types");
  model.set_parameters(data.parameters);
  model.set_statistics(data.avg, data.stdev);
  model.set_energy_bias(data.energy_bias);
  if (tables == ModelTables::install && data.compression) {
    try {
      model.set_embedding_table(embedding_table_data(*data.compression));
    } catch (Error const& e) {
      throw Error(source + ": " + e.what());
    }
  }
}

/// Builds the EnergyModel that `data` describes (its descriptor, fitting net and ntypes) and
/// installs the file's contents with install_model_data (a compressed model's tables too: the
/// model then evaluates them, docs/compression.md), in precision `Scalar` whatever precision
/// the file was trained in. `file` names the source in errors.
template <class Scalar, class ExecutionSpace>
std::unique_ptr<EnergyModel<Scalar, ExecutionSpace>> load_energy_model(ModelFileData const& data,
                                                                        std::string const& file) {
  auto model = std::make_unique<EnergyModel<Scalar, ExecutionSpace>>(data.descriptor, data.fitting, data.ntypes);
  install_model_data(data, *model, file, ModelTables::install);
  return model;
}

}  // namespace dpk
