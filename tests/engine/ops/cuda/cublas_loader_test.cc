// The dlopen'ed cuBLAS (cublas_loader.h): it loads without a GPU, every entry
// point resolves, and -- the reason it is dlopen'ed -- a thread with the
// 100 KiB stack Debian's civetweb gives the Prometheus exposer still starts
// after cuBLAS is loaded.
#include "gtest/gtest.h"

#ifndef VISMOE_HAVE_CUDA

TEST(CublasLoaderTest, BuiltWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }

#else

#include <pthread.h>

#include <cstring>
#include <string>

#include "engine/ops/cuda/cublas_loader.h"
#include "engine/device/cuda/cuda_status.h"

namespace vismoe::cuda {
namespace {

TEST(CublasLoaderTest, LoadsAndResolvesEveryEntryPoint) {
  absl::StatusOr<const CublasApi*> api = LoadCublas();
  ASSERT_TRUE(api.ok()) << api.status();
  EXPECT_FALSE((*api)->library.empty());
  ASSERT_NE((*api)->status_name, nullptr);
  EXPECT_STREQ((*api)->status_name(CUBLAS_STATUS_INVALID_VALUE), "CUBLAS_STATUS_INVALID_VALUE");
  EXPECT_NE((*api)->create, nullptr);
  EXPECT_NE((*api)->gemm_ex, nullptr);
  EXPECT_NE((*api)->gemm_grouped_batched_ex, nullptr);
  // Loaded once: the same table every time.
  EXPECT_EQ(*LoadCublas(), *api);
}

TEST(CublasLoaderTest, ErrorStatusNamesTheCublasError) {
  const absl::Status st =
      CublasErrorToStatus(CUBLAS_STATUS_NOT_SUPPORTED, "cublasGemmEx(...)", "gemm.cc", 3);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(st.message()).find("CUBLAS_STATUS_NOT_SUPPORTED"), std::string::npos)
      << st;
}

void* Nothing(void*) { return nullptr; }

TEST(CublasLoaderTest, SmallStackThreadsStillStartAfterLoading) {
  ASSERT_TRUE(LoadCublas().ok());
  pthread_attr_t attr;
  ASSERT_EQ(pthread_attr_init(&attr), 0);
  ASSERT_EQ(pthread_attr_setstacksize(&attr, 100 * 1024), 0);  // civetweb's USE_STACK_SIZE
  pthread_t t;
  const int rc = pthread_create(&t, &attr, Nothing, nullptr);
  pthread_attr_destroy(&attr);
  ASSERT_EQ(rc, 0) << "pthread_create with a 100 KiB stack: " << std::strerror(rc);
  pthread_join(t, nullptr);
}

}  // namespace
}  // namespace vismoe::cuda

#endif  // VISMOE_HAVE_CUDA
