// `ferry runtime`: the process of a runtime node (a node made of operators).
// The daemon (`ferry run`) starts it for every runtime node whose operators
// are all shared libraries; one with a Python operator runs under
// `python -m ferry.runtime` (python/ferry/runtime.py), which hosts both kinds.
//
// Environment, set by the daemon:
//   FERRY_NODE_CONFIG  the node's NodeConfig (src/flow/node/protocol.h). For a
//     runtime node its inputs and outputs are those that cross the node's
//     boundary, with ids "<operator>/<input>" and "<operator>/<output>":
//     an input whose source is another node or a timer, and an output that
//     some other node consumes. An operator output consumed inside the
//     runtime is delivered in-process (no transport) and, when the node
//     also has the output "<operator>/<output>", published there too.
//   FERRY_OPERATORS    the runtime's operators as a JSON list, in descriptor
//     order (ParseOperatorList in operator_list.h reads it):
//       [{"id": "scale",
//         "kind": "shared-library",            // or "python"
//         "path": "/abs/path/libscale.so",     // or the .py script
//         "inputs": [{"id": "tick", "source": "external"},
//                    {"id": "values", "source": "scale/values",   // "<operator>/<output>"
//                     "queue_size": 64, "overflow": "block"}],    // both optional
//         "outputs": ["values"],
//         "config": {"device": "opencl", "rows": 1024}}]          // optional, an object
//     "source" is "external" for an input fed from outside the runtime (it
//     is then the node input "<operator>/<input>"), else the operator output
//     that feeds it. OperatorListToJson / OperatorDefinitionsOf build it.
//
// Exit status: 0 when every operator finished without error; 1 when an
// operator failed (to load, to start, or while running) or the node did;
// 2 for a bad command line or environment.
#pragma once

namespace ferry::flow {

class OperatorHost;

// The `ferry runtime` subcommand (argv[0] is the program, then its options:
// only --help).
int RunOperatorRuntime(int argc, char** argv);

// Connects to the daemon as the node of FERRY_NODE_CONFIG, runs `host`'s
// operators until they finish, and returns the exit status described above
// (messages go to stderr). Shared with `python -m ferry.runtime`.
int RunHostOnNode(OperatorHost& host);

}  // namespace ferry::flow
