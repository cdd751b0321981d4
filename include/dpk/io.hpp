#pragma once
/// \file io.hpp
/// \brief Umbrella header of dpk's input side: npy files, deepmd/npy systems, input.json,
/// batch sampling and upload to the device.

#include <dpk/io/data_sampler.hpp>
#include <dpk/io/input.hpp>
#include <dpk/io/npy.hpp>
#include <dpk/io/system.hpp>
