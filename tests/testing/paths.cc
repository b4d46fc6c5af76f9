#include "tests/testing/paths.h"
