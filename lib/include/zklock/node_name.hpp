// Moved to zklock/protocol/node_name.hpp (the on-ZooKeeper layout); kept so existing code compiles.
#pragma once
#include "zklock/protocol/node_name.hpp"
