// TfpipeColumnCut: one column of a chunk of columnar blocks in one pass. Each block holds `rows[b]` rows of
// the column at byte `offsets[b]` (`width` values of the stored type S per row, little-endian); the output is
// the chunk's rows (all of them in order, or the rows `select` names by their ordinal in the chunk) widened
// to the output type T, `[rows, width]`. It replaces substr + decode_raw + gather + cast (four copies) with
// one. The blocks' framing is checked by the graph before this runs; the kernel still refuses any row that
// would read outside its block.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the columnar layout is little-endian: this kernel reads it on little-endian hosts only"
#endif

namespace tfpipe {
using ::tensorflow::DEVICE_CPU;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::tstring;

REGISTER_OP("TfpipeColumnCut")
    .Input("blocks: string")
    .Input("offsets: int64")
    .Input("rows: int64")
    .Input("select: int64")
    .Attr("block_rows: int >= 1")
    .Attr("width: int >= 1")
    .Attr("ordered: bool")
    .Attr("S: {uint8, int8, uint16, int16, int32, int64, float}")
    .Attr("T: {int64, float}")
    .Output("values: T")
    .SetShapeFn([](::tensorflow::shape_inference::InferenceContext* c) {
      int64_t width;
      TF_RETURN_IF_ERROR(c->GetAttr("width", &width));
      c->set_output(0, c->Matrix(c->UnknownDim(), width));
      return absl::OkStatus();
    });

// n values of type S at src (any alignment) as T at dst.
template <typename S, typename T>
inline void widen(const char* src, T* dst, int64_t n) {
  if constexpr (std::is_same<S, T>::value) {
    std::memcpy(dst, src, n * sizeof(T));
  } else {
    for (int64_t k = 0; k < n; ++k) {
      S v;
      std::memcpy(&v, src + k * sizeof(S), sizeof(S));
      dst[k] = static_cast<T>(v);
    }
  }
}

template <typename S, typename T>
class ColumnCutOp : public OpKernel {
 public:
  explicit ColumnCutOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("block_rows", &block_rows_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("width", &width_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("ordered", &ordered_));
  }

  void Compute(OpKernelContext* ctx) override {
    const auto blocks = ctx->input(0).flat<tstring>();
    const auto offsets = ctx->input(1).flat<int64_t>();
    const auto rows = ctx->input(2).flat<int64_t>();
    const auto select = ctx->input(3).flat<int64_t>();
    const int64_t nb = blocks.size();
    OP_REQUIRES(ctx, offsets.size() == nb && rows.size() == nb,
                absl::InvalidArgumentError(absl::StrCat("TfpipeColumnCut: ", nb, " blocks, ", offsets.size(),
                                                        " offsets, ", rows.size(), " row counts")));
    const int64_t row_bytes = width_ * static_cast<int64_t>(sizeof(S));
    // block b holds the chunk's rows starts[b] .. starts[b + 1] - 1
    std::vector<int64_t> starts(nb + 1, 0);
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t r = rows(b);
      OP_REQUIRES(ctx, r >= 0 && r <= block_rows_,
                  absl::InvalidArgumentError(absl::StrCat("TfpipeColumnCut: block ", b, " of the chunk has ", r,
                                                          " rows, not 0..", block_rows_)));
      OP_REQUIRES(ctx, r == 0 || (offsets(b) >= 0 && offsets(b) + r * row_bytes <=
                                                        static_cast<int64_t>(blocks(b).size())),
                  absl::InvalidArgumentError(absl::StrCat(
                      "TfpipeColumnCut: block ", b, " of the chunk: ", r, " rows of ", row_bytes, " bytes at byte ",
                      offsets(b), " run past its ", blocks(b).size(), " bytes")));
      starts[b + 1] = starts[b] + r;
    }
    const int64_t total = starts[nb];
    const int64_t m = ordered_ ? total : select.size();
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({m, width_}), &out));
    T* dst = out->flat<T>().data();
    if (ordered_) {
      for (int64_t b = 0; b < nb; ++b) {
        if (rows(b) == 0) continue;
        widen<S, T>(blocks(b).data() + offsets(b), dst + starts[b] * width_, rows(b) * width_);
      }
      return;
    }
    for (int64_t j = 0; j < m; ++j) {
      OP_REQUIRES(ctx, select(j) >= 0 && select(j) < total,
                  absl::InvalidArgumentError(absl::StrCat("TfpipeColumnCut: row ", select(j),
                                                          " asked of a chunk of ", total, " rows")));
    }
    auto source = [&](int64_t s) -> const char* {
      // starts[b] <= b * block_rows, so the block holding row s is s / block_rows or a later one
      int64_t b = std::min(s / block_rows_, nb - 1);
      if (starts[b + 1] <= s) {
        b = std::upper_bound(starts.begin() + b + 1, starts.end(), s) - starts.begin() - 1;
      }
      return blocks(b).data() + offsets(b) + (s - starts[b]) * row_bytes;
    };
    // the rows are read in a random order: ask for the row kAhead rows on before it is needed
    constexpr int64_t kAhead = 8;
    const int64_t reach = std::min<int64_t>(row_bytes, 256);
    for (int64_t j = 0; j < m; ++j) {
      if (j + kAhead < m) {
        const char* next = source(select(j + kAhead));
        for (int64_t o = 0; o < reach; o += 64) __builtin_prefetch(next + o);
      }
      widen<S, T>(source(select(j)), dst + j * width_, width_);
    }
  }

 private:
  int64_t block_rows_;
  int64_t width_;
  bool ordered_;
};

#define TFPIPE_REGISTER(S, T)                                                                    \
  REGISTER_KERNEL_BUILDER(                                                                       \
      Name("TfpipeColumnCut").Device(DEVICE_CPU).TypeConstraint<S>("S").TypeConstraint<T>("T"), \
      ColumnCutOp<S, T>);
#define TFPIPE_REGISTER_STORED(T) \
  TFPIPE_REGISTER(uint8_t, T)     \
  TFPIPE_REGISTER(int8_t, T)      \
  TFPIPE_REGISTER(uint16_t, T)    \
  TFPIPE_REGISTER(int16_t, T)     \
  TFPIPE_REGISTER(int32_t, T)     \
  TFPIPE_REGISTER(int64_t, T)     \
  TFPIPE_REGISTER(float, T)
TFPIPE_REGISTER_STORED(int64_t)
TFPIPE_REGISTER_STORED(float)

}  // namespace tfpipe
