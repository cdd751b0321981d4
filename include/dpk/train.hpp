#pragma once
/// \file train.hpp
/// \brief Umbrella header of dpk's training side: input and data (io), the model, the
/// trainer with its schedules, optimiser, checkpoints and learning curve, and MPI.

#include <dpk/io.hpp>
#include <dpk/model/energy_model.hpp>
#include <dpk/parallel/communicator.hpp>
#include <dpk/train/adam.hpp>
#include <dpk/train/data_neighbor_distance.hpp>
#include <dpk/train/data_neighbor_stat.hpp>
#include <dpk/train/ener_loss.hpp>
#include <dpk/train/energy_bias.hpp>
#include <dpk/train/lcurve.hpp>
#include <dpk/train/learning_rate.hpp>
#include <dpk/io/model_file.hpp>
#include <dpk/train/trainer.hpp>
