#pragma once
// The report that a group's abort message ends with: where its processes are in the sequence of collectives (Note
// [Desync reports] in collective_progress.h).

#include <optional>
#include <string>
#include <vector>

#include "collective_progress.h"

namespace tandem::comm::detail {

// ranks[r]: rank r's progress, nullopt when it did not answer. One line, in this order:
//  - the first collective at which the answers disagree (another op or another size at one number, from the ranks'
//    pending and last completed collectives): "mismatch at #2: all_reduce of 16 bytes on ranks 0, 2, barrier on rank
//    1";
//  - otherwise where the ranks are, those that lag first: "rank 1 is in no collective, after all_reduce #3 of 16
//    bytes; ranks 0, 2 wait in barrier #4", "rank 2 is at all_reduce #417 of 4194304 bytes; ranks 0, 1 wait in
//    all_gather #418 of 8 bytes", or "every rank waits in all_reduce #5 of 16 bytes" when all of them are at one place;
//  - then the ranks that did not answer: "rank 3 did not answer".
std::string desync_report(const std::vector<std::optional<RankProgress>>& ranks);

}  // namespace tandem::comm::detail
