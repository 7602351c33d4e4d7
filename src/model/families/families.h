// The families the registry lists, one file each (model/family.h).
#pragma once

#include "model/family.h"

namespace ctune::model::families {

const Family& llama();
const Family& mistral();
const Family& qwen2();
const Family& qwen3();

}  // namespace ctune::model::families
