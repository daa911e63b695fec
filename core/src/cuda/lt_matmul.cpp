// cuBLASLt products: fused epilogues and small plain products (see lt_matmul.h).

#include "cuda/lt_matmul.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "allocator.h"
#include "cuda/gemm_operand.h"
#include "tandem/core/cuda/context.h"
#include "tandem/core/matmul_settings.h"

namespace tandem::cuda {
namespace {

// Note [cuBLASLt workspace]: cuBLASLt kernels (split-K ones among them) may need scratch memory. Each device gets
// one workspace of 32 MiB, the size NVIDIA recommends for Hopper, allocated with cudaMalloc together with the
// device's cuBLASLt handle before its first cuBLASLt product, and kept for the life of the process like the streams
// and cuBLAS handles of context.cpp (outside the caching allocator, so its statistics do not count it). Every
// product on a device is issued on the device's compute stream (Note [Streams]), so they run one after another and
// share the workspace safely.
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

// Note [cuBLASLt plans]: what a cuBLASLt product needs besides its pointers (the matmul descriptor with transposes,
// compute type and epilogue; the layouts of A, B and C = D; the algorithm taken from cublasLtMatmulAlgoGetHeuristic's
// ranking, Note [One kernel for small products]) depends only on its PlanKey: sizes, transposes, leading dimensions,
// compute type and operand type (the product's precision), epilogue, and the alignments of the matrices' columns, by
// which cuBLASLt chooses kernels (the bias or row-sum vector is always 16-byte aligned: lt_matmul takes no other). So a
// plan is built once per key and device and kept: a training step asks for a handful of keys, and each product after
// the first costs a map lookup. The vector's pointer, which changes from call to call, is set on the cached descriptor
// just before the call; the device's mutex, held from the lookup to the enqueue, keeps threads from interleaving there.
// A key for which cuBLASLt has no algorithm (the heuristic fails, typically with CUBLAS_STATUS_NOT_SUPPORTED, or finds
// none: no kernel for that combination of epilogue, transposes, alignments and compute type) is kept too, marked
// unusable, so that the heuristic is asked once; so is a key whose algorithm cublasLtMatmul refuses at launch. Their
// products take the cuBLAS path, with the epilogue done in passes of its own (gemm.cpp). The map is cleared when it
// holds kMaxPlans keys, so that ever new shapes cannot grow it without bound.
constexpr size_t kMaxPlans = 256;

// Note [One kernel for small products]: for some shapes cuBLAS and the heuristic's first algorithm split k over several
// thread blocks and add their partial products in a reduction kernel of their own (cuBLAS through its dot and reduce
// kernels, with a workspace that a captured graph allocates and frees): a forward product with k = 10, or a small
// layer's weight gradient over a batch (m * n tiny, k = the batch). Small products (at most kSmallProductMacs
// multiply-adds, or k <= kShortK) therefore come through cuBLASLt, which has no workspace of its own (lt_matmul.h).
// Where k is short (k <= kShortK), splitting it cannot pay: one block's share is a tile or two, so the second launch
// costs more than the split saves; those products ask the heuristic for unsplit algorithms only and take the first of
// its ranking that really is one (checked against each algorithm's configuration). Where k is long, a split is what
// makes a tiny output fast: without one a single block walks all of k, and splits added in place in the output
// (CUBLASLT_REDUCTION_SCHEME_INPLACE) serialize the blocks, each waiting for the one before (the seed net's weight
// gradient became many times slower: docs/benchmarks.md, "Design measurements"); so those keep the heuristic's first
// choice, split and reduction kernel included, as do all larger products (a wide MLP's 4096-wide layers; a tiny output
// over a long k never gets here: Note [Tiny products] in small_products.h, nor a product with k <= 32, at most 2^20
// output elements and no row sums: Note [Short products]). A short-k product with row sums (BGRADB) and no unsplit
// algorithm leaves its plan unusable: gemm.cpp sums the rows in a kernel of its own and the product takes one.
constexpr double kSmallProductMacs = double{1 << 20};
constexpr int64_t kShortK = 128;
// How many algorithms of the heuristic's ranking are looked at for one that finishes in one kernel.
constexpr int kRankedAlgorithms = 8;

bool small_product(int64_t m, int64_t n, int64_t k) {
  return k <= kShortK || static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) <= kSmallProductMacs;
}

// The largest power of two, up to 16, that divides `bytes`.
uint32_t alignment_of(uintptr_t bytes) {
  uint32_t alignment = 16;
  while (alignment > 1 && bytes % alignment != 0) alignment /= 2;
  return alignment;
}

uint32_t pointer_alignment(const void* pointer) { return alignment_of(reinterpret_cast<uintptr_t>(pointer)); }

// The alignment of every column of a column-major matrix of `element`-byte elements: of its first element's address
// and of the distance between columns (ld elements), which is what cuBLASLt is told of the matrix, so that it
// assumes no more of any column.
uint32_t matrix_alignment(const void* pointer, int64_t ld, size_t element) {
  return alignment_of(reinterpret_cast<uintptr_t>(pointer) | static_cast<uintptr_t>(ld) * element);
}

// Owns one cuBLASLt descriptor.
template <typename Handle, cublasStatus_t (*destroy)(Handle)>
class Owned {
 public:
  Owned() = default;
  ~Owned() {
    if (handle_ != nullptr) (void)destroy(handle_);
  }
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  Handle* out() { return &handle_; }
  Handle get() const { return handle_; }

 private:
  Handle handle_ = nullptr;
};
using MatmulDesc = Owned<cublasLtMatmulDesc_t, cublasLtMatmulDescDestroy>;
using MatrixLayout = Owned<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy>;
using Preference = Owned<cublasLtMatmulPreference_t, cublasLtMatmulPreferenceDestroy>;

template <typename T>
void set_attribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute, const T& value) {
  TANDEM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof(value)));
}

template <typename T>
void set_preference(cublasLtMatmulPreference_t preference, cublasLtMatmulPreferenceAttributes_t attribute,
                    const T& value) {
  TANDEM_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, attribute, &value, sizeof(value)));
}

// What a plan depends on, in cuBLASLt's terms (Note [Row-major operands]): its A is our b, its B our a, and its
// D = C is out^T, a column-major [n, m] with leading dimension n.
struct PlanKey {
  int64_t m, n, k;
  int64_t lda, ldb;
  cublasOperation_t op_a, op_b;
  cublasComputeType_t compute;
  cudaDataType_t operand;  // of A and B; C = D are float32
  cublasLtEpilogue_t epilogue;
  uint32_t align_a, align_b, align_d;
  bool operator==(const PlanKey&) const = default;
};

struct PlanKeyHash {
  size_t operator()(const PlanKey& key) const {
    size_t hash = 0;
    for (const uint64_t field :
         {static_cast<uint64_t>(key.m), static_cast<uint64_t>(key.n), static_cast<uint64_t>(key.k),
          static_cast<uint64_t>(key.lda), static_cast<uint64_t>(key.ldb), static_cast<uint64_t>(key.op_a),
          static_cast<uint64_t>(key.op_b), static_cast<uint64_t>(key.compute), static_cast<uint64_t>(key.operand),
          static_cast<uint64_t>(key.epilogue), static_cast<uint64_t>(key.align_a), static_cast<uint64_t>(key.align_b),
          static_cast<uint64_t>(key.align_d)})
      hash ^= std::hash<uint64_t>{}(field) + 0x9e3779b97f4a7c15ULL + (hash << 6) + (hash >> 2);
    return hash;
  }
};

// A product's cuBLASLt description and the algorithm chosen for it; not usable when cuBLASLt has none.
struct Plan {
  MatmulDesc desc;
  MatrixLayout a, b, d;
  cublasLtMatmulAlgo_t algo{};
  bool usable = false;
};

// The algorithms the heuristic finds for `plan` under `preference`, best first; none when it has none.
std::vector<cublasLtMatmulAlgo_t> ranked_algorithms(cublasLtHandle_t handle, const Plan& plan,
                                                    cublasLtMatmulPreference_t preference) {
  std::array<cublasLtMatmulHeuristicResult_t, kRankedAlgorithms> results{};
  int found = 0;
  const cublasStatus_t status =
      cublasLtMatmulAlgoGetHeuristic(handle, plan.desc.get(), plan.a.get(), plan.b.get(), plan.d.get(), plan.d.get(),
                                     preference, kRankedAlgorithms, results.data(), &found);
  std::vector<cublasLtMatmulAlgo_t> ranked;
  if (status != CUBLAS_STATUS_SUCCESS) return ranked;
  for (int i = 0; i < found && i < kRankedAlgorithms; ++i)
    if (results[i].state == CUBLAS_STATUS_SUCCESS) ranked.push_back(results[i].algo);
  return ranked;
}

// Whether `algo` splits k (Note [One kernel for small products]); an algorithm whose configuration cannot be read
// counts as one that does.
bool splits_k(const cublasLtMatmulAlgo_t& algo) {
  int32_t splits = 1;
  uint32_t scheme = CUBLASLT_REDUCTION_SCHEME_NONE;
  size_t written = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits, sizeof(splits), &written) !=
          CUBLAS_STATUS_SUCCESS ||
      cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme, sizeof(scheme),
                                           &written) != CUBLAS_STATUS_SUCCESS)
    return true;
  return splits > 1 || scheme != CUBLASLT_REDUCTION_SCHEME_NONE;
}

// The algorithm for `plan` (whose key is `key`): for a short k the best unsplit one, if any (Note [One kernel for
// small products]); otherwise the heuristic's first; none when the heuristic has none, or for a short k with row sums
// and no unsplit algorithm.
std::optional<cublasLtMatmulAlgo_t> choose_algorithm(cublasLtHandle_t handle, const PlanKey& key, const Plan& plan,
                                                     cublasLtMatmulPreference_t preference) {
  if (key.k <= kShortK) {
    set_preference(preference, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                   static_cast<uint32_t>(CUBLASLT_REDUCTION_SCHEME_NONE));
    for (const cublasLtMatmulAlgo_t& algo : ranked_algorithms(handle, plan, preference))
      if (!splits_k(algo)) return algo;
    if (key.epilogue == CUBLASLT_EPILOGUE_BGRADB) return std::nullopt;
    set_preference(preference, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                   static_cast<uint32_t>(CUBLASLT_REDUCTION_SCHEME_MASK));
  }
  const std::vector<cublasLtMatmulAlgo_t> ranked = ranked_algorithms(handle, plan, preference);
  if (ranked.empty()) return std::nullopt;
  return ranked.front();
}

// `vector` is the bias or row-sum pointer of the first product with this key (null when the epilogue has none): the
// heuristic reads its alignment.
std::unique_ptr<Plan> make_plan(cublasLtHandle_t handle, const PlanKey& key, void* vector) {
  auto plan = std::make_unique<Plan>();
  TANDEM_CUBLAS_CHECK(cublasLtMatmulDescCreate(plan->desc.out(), key.compute, CUDA_R_32F));
  set_attribute(plan->desc.get(), CUBLASLT_MATMUL_DESC_TRANSA, key.op_a);
  set_attribute(plan->desc.get(), CUBLASLT_MATMUL_DESC_TRANSB, key.op_b);
  set_attribute(plan->desc.get(), CUBLASLT_MATMUL_DESC_EPILOGUE, key.epilogue);
  if (vector != nullptr) set_attribute(plan->desc.get(), CUBLASLT_MATMUL_DESC_BIAS_POINTER, vector);
  // op(A) is [n, k] and op(B) is [k, m]; a layout describes the stored matrix, before its transpose.
  const bool a_plain = key.op_a == CUBLAS_OP_N;
  const bool b_plain = key.op_b == CUBLAS_OP_N;
  TANDEM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(plan->a.out(), key.operand, a_plain ? key.n : key.k,
                                                 a_plain ? key.k : key.n, key.lda));
  TANDEM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(plan->b.out(), key.operand, b_plain ? key.k : key.m,
                                                 b_plain ? key.m : key.k, key.ldb));
  TANDEM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(plan->d.out(), CUDA_R_32F, key.n, key.m, key.n));

  Preference preference;
  TANDEM_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(preference.out()));
  set_preference(preference.get(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<uint64_t>(kWorkspaceBytes));
  set_preference(preference.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_a);
  set_preference(preference.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_b);
  set_preference(preference.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_d);
  set_preference(preference.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_d);
  const std::optional<cublasLtMatmulAlgo_t> algo = choose_algorithm(handle, key, *plan, preference.get());
  plan->usable = algo.has_value();
  if (plan->usable) plan->algo = *algo;
  return plan;
}

// One device's cuBLASLt state.
struct LtDevice {
  std::once_flag created;
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;  // kWorkspaceBytes (Note [cuBLASLt workspace])
  std::mutex mutex;           // guards plans, and each cached descriptor from its lookup to its product's enqueue
  std::unordered_map<PlanKey, std::unique_ptr<Plan>, PlanKeyHash> plans;
};

// Requires `device` to be current. Created on first use and never destroyed, like the contexts of context.cpp.
LtDevice& lt_device(int device) {
  static const int count = alloc::cuda_visible_devices();
  static LtDevice* const devices = new LtDevice[count];
  // The backend passes the devices of existing tensors, which check_device_available has accepted.
  TANDEM_INTERNAL_ASSERT(device >= 0 && device < count, "cuda::lt_matmul: device cuda:", device, " does not exist (",
                         count, " CUDA devices visible)");
  LtDevice& state = devices[device];
  std::call_once(state.created, [&] {
    cublasLtHandle_t handle = nullptr;
    TANDEM_CUBLAS_CHECK(cublasLtCreate(&handle));
    void* workspace = nullptr;
    const cudaError_t status = cudaMalloc(&workspace, kWorkspaceBytes);
    if (status != cudaSuccess) {
      (void)cublasLtDestroy(handle);
      throw_cuda_error(status, "cudaMalloc (the cuBLASLt workspace)", __FILE__, __LINE__);
    }
    state.handle = handle;
    state.workspace = workspace;
  });
  return state;
}

// The epilogue that fuses what `options` asks for besides the product.
cublasLtEpilogue_t epilogue_of(const backend::GemmOptions& options) {
  if (options.a_row_sums.defined()) return CUBLASLT_EPILOGUE_BGRADB;
  if (options.bias.defined()) return options.relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
  return options.relu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_DEFAULT;
}

}  // namespace

void create_lt_state(int device) {
  DeviceGuard guard(device);
  (void)lt_device(device);
}

bool lt_matmul(const Tensor& a, const Tensor& b, const backend::GemmOptions& options, const Tensor& out, int device) {
  const Tensor& vector = options.bias.defined() ? options.bias : options.a_row_sums;
  const int64_t m = out.size(0);
  const int64_t n = out.size(1);
  const int64_t k = a.size(1);
  const bool fused = vector.defined() || options.relu;
  if (fused ? !fused_linear() : !small_product(m, n, k)) return false;
  void* const vector_data = vector.defined() ? vector.mutable_data_ptr() : nullptr;
  if (m == 0 || n == 0 || k == 0 || (vector_data != nullptr && pointer_alignment(vector_data) < 16)) return false;

  const Operand left = transposed_operand(b, "b");
  const Operand right = transposed_operand(a, "a");
  const size_t element = element_size(a.dtype());
  // BIAS adds a vector of D's row count (n) to every column of D = out^T (RELU_BIAS then clamps D at 0); BGRADB sums
  // op(B) = a^T over k into a vector of D's column count (m).
  const PlanKey key{m,
                    n,
                    k,
                    left.ld,
                    right.ld,
                    left.op,
                    right.op,
                    compute_type(options.precision),
                    operand_type(options.precision),
                    epilogue_of(options),
                    matrix_alignment(b.data_ptr(), left.ld, element),
                    matrix_alignment(a.data_ptr(), right.ld, element),
                    matrix_alignment(out.data_ptr(), n, sizeof(float))};
  LtDevice& state = lt_device(device);
  std::lock_guard<std::mutex> lock(state.mutex);
  auto found = state.plans.find(key);
  if (found == state.plans.end()) {
    if (state.plans.size() >= kMaxPlans) state.plans.clear();
    found = state.plans.emplace(key, make_plan(state.handle, key, vector_data)).first;
  }
  Plan& plan = *found->second;
  if (!plan.usable) return false;
  if (vector_data != nullptr) set_attribute(plan.desc.get(), CUBLASLT_MATMUL_DESC_BIAS_POINTER, vector_data);
  const float alpha = 1.0f;
  const float beta = options.accumulate ? 1.0f : 0.0f;
  const cublasStatus_t status =
      cublasLtMatmul(state.handle, plan.desc.get(), &alpha, b.data_ptr(), plan.a.get(), a.data_ptr(), plan.b.get(),
                     &beta, out.data(), plan.d.get(), out.mutable_data(), plan.d.get(), &plan.algo, state.workspace,
                     kWorkspaceBytes, compute_stream(device));
  // The heuristic's algorithm refused at launch (nothing was enqueued) counts as none.
  if (status == CUBLAS_STATUS_NOT_SUPPORTED) {
    plan.usable = false;
    return false;
  }
  if (status != CUBLAS_STATUS_SUCCESS) throw_cublas_error(status, "cublasLtMatmul", __FILE__, __LINE__);
  return true;
}

}  // namespace tandem::cuda
