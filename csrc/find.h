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
  std::string found_under;   // the descriptor's math type of the Find call that returned it
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
  std::string math_type;  // PyTorch's math type: the first Find call's, and the heuristics'
  std::vector<std::string> searched;  // the math types Find ran under, in order
  std::vector<std::string> find_errors;  // "MATH_TYPE: status" of a Find call cuDNN refused
  std::vector<AlgoPerf> find;
  std::vector<AlgoPerf> heuristics;
  std::vector<WorkspaceQuery> workspace;
  int64_t workspace_needed = 0;  // max over every successful workspace query
  int64_t workspace_given = 0;   // what Find was given: needed, the cap, or what was free
  int64_t workspace_free = -1;   // the largest block the GPU could give then (Note [Find
                                 // workspace that fits]); -1: not asked (enough was free)
  int requested = 0;             // rows asked of each Find call
  int returned = 0;              // the most rows one Find call returned
  double find_wall_ms = 0.0;     // host wall time of the first (PyTorch's) Find call
  double find_wall_ms_all = 0.0; // host wall time of every Find call
  std::string problem;
};

// "IMPLICIT_PRECOMP_GEMM", "ALGO_1", ...: the enum's name without its prefix.
std::string algo_name(Direction d, int algo);

// cudnnFind*Ex once under each math type of ``math_types`` (the first: PyTorch's, whose
// heuristics are listed too), every row kept with the math type it was found under.
// max_workspace_bytes < 0: no cap.
FindReport find_algorithms(Direction d, Problem& p, int64_t max_workspace_bytes,
                           const std::vector<std::string>& math_types);

// Workspace cudnnGet*WorkspaceSize reports for one (algorithm, math type).
WorkspaceQuery workspace_size(Direction d, Problem& p, int algo, const std::string& math_type);

// Run one algorithm once with its own math type and exactly the workspace it asks for;
// the direction's output tensor is overwritten (beta = 0).
void run_algorithm(Direction d, Problem& p, int algo, const std::string& math_type);

}  // namespace cudnn_explorer
