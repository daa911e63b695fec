// desync_report: the text of Note [Desync reports] (collective_progress.h) from every rank's progress.

#include "desync_report.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <utility>

namespace tandem::comm::detail {
namespace {

// "rank 3", "ranks 0, 2".
std::string rank_list(const std::vector<int>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) text += (i == 0 ? "" : ", ") + std::to_string(ranks[i]);
  return text;
}

std::string op_of(const CollectiveRecord& record) {
  return std::string(record.op, strnlen(record.op, CollectiveRecord::kMaxOp));
}

// "all_reduce of 16 bytes", "barrier": a collective without its number.
std::string call_of(const CollectiveRecord& record) {
  return record.bytes == 0 ? op_of(record) : op_of(record) + " of " + std::to_string(record.bytes) + " bytes";
}

// The first collective that the ranks' records disagree on, described; empty when they agree.
std::string first_mismatch(const std::vector<std::optional<RankProgress>>& ranks) {
  // sequence -> the calls made at it, each with its ranks in rank order (a rank that completed and then began
  // the same number cannot: numbers only grow, so each rank appears once per sequence).
  std::map<uint64_t, std::vector<std::pair<std::string, std::vector<int>>>> calls;
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (!ranks[r]) continue;
    for (const CollectiveRecord* record : {&ranks[r]->completed, &ranks[r]->pending}) {
      if (record->empty()) continue;
      auto& at = calls[record->sequence];
      const std::string call = call_of(*record);
      auto same = std::find_if(at.begin(), at.end(), [&](const auto& entry) { return entry.first == call; });
      if (same == at.end()) same = at.insert(at.end(), {call, {}});
      same->second.push_back(static_cast<int>(r));
    }
  }
  for (const auto& [sequence, at] : calls) {
    if (at.size() < 2) continue;
    std::string text = "mismatch at #" + std::to_string(sequence) + ": ";
    for (size_t i = 0; i < at.size(); ++i) {
      text += (i == 0 ? "" : ", ") + at[i].first + " on " + rank_list(at[i].second);
    }
    return text;
  }
  return {};
}

// Where a rank is, as an order: in collective n is 2n, in none after collective n is 2n + 1.
uint64_t position(const RankProgress& progress) {
  return progress.pending.empty() ? 2 * progress.completed.sequence + 1 : 2 * progress.pending.sequence;
}

// "wait in barrier #4" / "is at all_reduce #3 of 16 bytes" / "is in no collective, after all_reduce #3 of 16 bytes".
std::string place_of(const RankProgress& progress, bool front, bool several) {
  if (progress.pending.empty()) {
    const std::string be = several ? "are" : "is";
    if (progress.completed.empty())
      return be + " in no collective and " + (several ? "have" : "has") + " completed none";
    return be + " in no collective, after " + progress.completed.describe();
  }
  if (front) return std::string(several ? "wait" : "waits") + " in " + progress.pending.describe();
  return std::string(several ? "are" : "is") + " at " + progress.pending.describe();
}

// Where the ranks are, those that lag first.
std::string places(const std::vector<std::optional<RankProgress>>& ranks) {
  std::map<uint64_t, std::vector<int>> at;  // position -> ranks
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (ranks[r]) at[position(*ranks[r])].push_back(static_cast<int>(r));
  }
  const bool everyone = at.size() == 1 && at.begin()->second.size() == ranks.size() && ranks.size() > 1;
  std::string text;
  for (auto it = at.begin(); it != at.end(); ++it) {
    const std::vector<int>& group = it->second;
    const bool front = std::next(it) == at.end();
    const std::string who = everyone ? "every rank" : rank_list(group);
    text += (text.empty() ? "" : "; ") + who + " " +
            place_of(*ranks[static_cast<size_t>(group[0])], front, !everyone && group.size() > 1);
  }
  return text;
}

}  // namespace

std::string desync_report(const std::vector<std::optional<RankProgress>>& ranks) {
  std::string report = first_mismatch(ranks);
  if (report.empty()) report = places(ranks);
  std::vector<int> silent;
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (!ranks[r]) silent.push_back(static_cast<int>(r));
  }
  if (!silent.empty()) report += (report.empty() ? "" : "; ") + rank_list(silent) + " did not answer";
  return report;
}

}  // namespace tandem::comm::detail
