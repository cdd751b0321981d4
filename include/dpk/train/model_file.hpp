#pragma once
/// \file model_file.hpp
/// \brief Former location of the model-file reader and writer, kept so that existing
/// `#include <dpk/train/model_file.hpp>` lines still build: the format lives in
/// `<dpk/io/model_file.hpp>` (below the trainer, so that inference needs no trainer header).

#include <dpk/io/model_file.hpp>
