#pragma once
// Data sets built into the library, so that examples and the trainer binary run without files.

#include <string_view>

namespace tandem::trainers::datasets {

// The diabetes regression data of Efron, Hastie, Johnstone and Tibshirani (2004), "Least Angle Regression":
// 442 rows, columns age,sex,bmi,bp,s1..s6 (raw) and target. The CSV text of data/diabetes.csv, embedded at build
// time.
std::string_view diabetes_csv();

}  // namespace tandem::trainers::datasets
