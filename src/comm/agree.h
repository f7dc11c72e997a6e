// Collective agreement on outcomes that only some ranks see: a rank that
// fails a step every rank must take (opening the output directory, saving
// a checkpoint) must not leave the others waiting in a collective that
// never comes. Each is a collective: every rank calls it at the same point.
#pragma once

#include <string>

#include "comm/communicator.h"
#include "tierflow/status.h"

namespace tierflow::comm {

// Ok when every rank's `local` is; otherwise every rank returns the first
// failed rank's error (its code, and its message prefixed "rank R of W: "),
// so all take the same branch and the user reads the cause wherever they
// look. Errors of the collectives themselves are returned as they are.
Status AgreeOnStatus(Communicator& comm, const Status& local);

// Rank `root`'s `*s` to every rank's `*s` (a size, then the bytes).
// Errors: InvalidArgument when the string is over 1 MiB (a path, a
// message: never data).
Status BroadcastString(Communicator& comm, std::string* s, int root);

}  // namespace tierflow::comm
