// Moved to zklock/protocol/node_data.hpp (the on-ZooKeeper layout); kept so existing code compiles.
#pragma once
#include "zklock/protocol/node_data.hpp"
