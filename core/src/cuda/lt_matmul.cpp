// cuBLASLt products with fused epilogues (see lt_matmul.h).

#include "cuda/lt_matmul.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>

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
// compute type and epilogue; the layouts of A, B and C = D; the algorithm cublasLtMatmulAlgoGetHeuristic picks)
// depends only on its PlanKey: sizes, transposes, leading dimensions, compute type and operand type (the product's
// precision), epilogue, and the alignments of the matrices' columns, by which cuBLASLt chooses kernels (the bias or
// row-sum vector is always 16-byte aligned: lt_matmul takes no other). So a plan is built once per key and device
// and kept: a training step asks for a handful of keys, and each product after the first costs a map lookup. The
// vector's pointer, which changes from call to call, is set on the cached descriptor just before the call; the
// device's mutex, held from the lookup to the enqueue, keeps threads from interleaving there. A key for which
// cuBLASLt has no algorithm (the heuristic fails, typically with CUBLAS_STATUS_NOT_SUPPORTED, or finds none: no
// kernel for that combination of epilogue, transposes, alignments and compute type) is kept too, marked unusable,
// so that the heuristic is asked once; so is a key whose algorithm cublasLtMatmul refuses at launch. Their products
// take the cuBLAS path, with the epilogue done in passes of its own (gemm.cpp). The map is cleared when it holds
// kMaxPlans keys, so that ever new shapes cannot grow it without bound.
constexpr size_t kMaxPlans = 256;

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
          static_cast<uint64_t>(key.epilogue),
          static_cast<uint64_t>(key.align_a), static_cast<uint64_t>(key.align_b), static_cast<uint64_t>(key.align_d)})
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
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status =
      cublasLtMatmulAlgoGetHeuristic(handle, plan->desc.get(), plan->a.get(), plan->b.get(), plan->d.get(),
                                     plan->d.get(), preference.get(), 1, &result, &found);
  plan->usable = status == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS;
  if (plan->usable) plan->algo = result.algo;
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
  return CUBLASLT_EPILOGUE_RELU;
}

}  // namespace

void create_lt_state(int device) {
  DeviceGuard guard(device);
  (void)lt_device(device);
}

bool lt_matmul(const Tensor& a, const Tensor& b, const backend::GemmOptions& options, const Tensor& out, int device) {
  const Tensor& vector = options.bias.defined() ? options.bias : options.a_row_sums;
  if (!fused_linear() || !(vector.defined() || options.relu)) return false;
  const int64_t m = out.size(0);
  const int64_t n = out.size(1);
  const int64_t k = a.size(1);
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
