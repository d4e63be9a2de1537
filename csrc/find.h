// Legacy-algorithm exploration: cudnnFind*Ex, cudnnGet*_v7 heuristics and
// cudnnGet*WorkspaceSize for every (algorithm, math type).
#pragma once

#include "problem.h"

#include <cstdint>
#include <string>
#include <vector>

namespace cudnn_explorer {

// One row of a cudnnFind*Ex or cudnnGet*_v7 result.
struct AlgoPerf {
  int algo = -1;
  std::string algo_name;
  int status_code = 0;
  std::string status;
  float time_ms = -1.0f;     // cudnnFind's own single measurement; -1 for heuristics
  int64_t memory_bytes = 0;  // workspace the row reports
  bool deterministic = false;
  std::string math_type;
};

// One cudnnGet*WorkspaceSize query.
struct WorkspaceQuery {
  int algo = -1;
  std::string algo_name;
  std::string math_type;
  int status_code = 0;
  std::string status;
  int64_t bytes = -1;  // -1 when the query failed
};

struct FindReport {
  std::string direction;
  std::string math_type;  // the descriptor's math type during Find and heuristics
  std::vector<AlgoPerf> find;
  std::vector<AlgoPerf> heuristics;
  std::vector<WorkspaceQuery> workspace;
  int64_t workspace_needed = 0;  // max over every successful workspace query
  int64_t workspace_given = 0;   // what Find was given (needed, or the cap)
  int requested = 0;             // rows asked of Find
  int returned = 0;              // rows Find returned
  double find_wall_ms = 0.0;     // host wall time of the cudnnFind*Ex call, synchronised
  std::string problem;
};

// "IMPLICIT_PRECOMP_GEMM", "ALGO_1", ...: the enum's name without its prefix.
std::string algo_name(Direction d, int algo);

// max_workspace_bytes < 0: no cap.
FindReport find_algorithms(Direction d, Problem& p, int64_t max_workspace_bytes);

// Workspace cudnnGet*WorkspaceSize reports for one (algorithm, math type).
WorkspaceQuery workspace_size(Direction d, Problem& p, int algo, const std::string& math_type);

// Run one algorithm once with its own math type and exactly the workspace it asks for;
// the direction's output tensor is overwritten (beta = 0).
void run_algorithm(Direction d, Problem& p, int algo, const std::string& math_type);

}  // namespace cudnn_explorer
