// The `build:` step of a dataflow (dora-rs's key): each node's build command
// runs once, in turn, before any node starts. A build is `/bin/sh -c
// <command>` in the descriptor's directory with the node's `env:` on top of
// the daemon's environment; its output goes through the node's NodeOutput
// with a "(build) " mark, so it lands on the terminal as "[node] (build) ..."
// and in the node's log file.
//
// Thread-compatible.
#pragma once

#include <string>

#include "ferry/base/status.h"
#include "ferry/flow/dataflow.h"
#include "flow/daemon/output.h"

namespace ferry::flow::daemon {

// Runs `node.build` (nothing when it is empty) in `working_directory` and
// waits for it. Invalid naming the node, the command and how it ended when
// it cannot start or does not exit 0.
Status RunBuild(const NodeSpec& node, const std::string& working_directory, NodeOutput& output);

}  // namespace ferry::flow::daemon
