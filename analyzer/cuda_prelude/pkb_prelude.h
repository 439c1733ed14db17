// pkb_prelude.h: a small, hand-written stand-in for the CUDA runtime, CUDA device intrinsics,
// cooperative groups, libcu++ atomics, NVSHMEM, the CUDA driver API and the torch C++ surface.
// The analyzer blanks out a candidate's #include lines and force-includes this file instead, so
// a parse takes milliseconds instead of seconds. Declarations only need to be good enough for
// clang to build complete ASTs: argument types are loose on purpose.
#pragma once

#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __host__ __attribute__((host))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define __managed__ __attribute__((managed))
#define __forceinline__ __inline__ __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))
#define __restrict__ __restrict
#define __align__(n) __attribute__((aligned(n)))
#define __grid_constant__
#define __CUDACC__ 1
#define __CUDA_ARCH__ 900
#define CUDART_VERSION 12040
#define __NVCC__ 1
#define PKB_HD __host__ __device__
#define PKB_D __device__ __forceinline__

#include "__clang_cuda_builtin_vars.h"

// ---- fixed-width integers and a sliver of the C/C++ library ----
typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long long int64_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
typedef unsigned long size_t;
typedef long ptrdiff_t;
typedef unsigned long uintptr_t;
typedef long intptr_t;
#define NULL 0
#define INT_MAX 2147483647
#define UINT32_MAX 4294967295u
#define FLT_MAX 3.402823466e+38F
#define INFINITY (__builtin_inff())
extern "C" {
PKB_HD int printf(const char*, ...);
int fprintf(void*, const char*, ...);
int snprintf(char*, size_t, const char*, ...);
void* malloc(size_t);
void free(void*);
void* memset(void*, int, size_t);
void* memcpy(void*, const void*, size_t);
void abort(void);
void exit(int);
PKB_HD void __assert_fail(const char*, const char*, unsigned, const char*);
}
extern void* stderr;
#define assert(e) ((void)0)
PKB_HD float sqrtf(float); PKB_HD float expf(float); PKB_HD float fabsf(float);
PKB_HD float fmaxf(float, float); PKB_HD float fminf(float, float); PKB_HD float rsqrtf(float);
PKB_HD float tanhf(float); PKB_HD float logf(float); PKB_HD float powf(float, float);
PKB_HD double sqrt(double); PKB_HD double exp(double); PKB_HD double fabs(double);
PKB_HD float __expf(float); PKB_HD float __fdividef(float, float);
PKB_HD int min(int, int); PKB_HD int max(int, int);
PKB_HD unsigned umin(unsigned, unsigned); PKB_HD unsigned umax(unsigned, unsigned);
PKB_HD long long llmin(long long, long long); PKB_HD long long llmax(long long, long long);
PKB_HD float fmaf(float, float, float);
// The rest of the CUDA math library device code calls (only their names and arity matter here).
#define PKB_MATH1(N) PKB_HD float N##f(float); PKB_HD double N(double);
#define PKB_MATH2(N) PKB_HD float N##f(float, float); PKB_HD double N(double, double);
PKB_MATH1(ceil) PKB_MATH1(floor) PKB_MATH1(round) PKB_MATH1(rint) PKB_MATH1(nearbyint) PKB_MATH1(trunc)
PKB_MATH1(log1p) PKB_MATH1(log2) PKB_MATH1(log10) PKB_MATH1(exp2) PKB_MATH1(expm1) PKB_MATH1(sin)
PKB_MATH1(cos) PKB_MATH1(tan) PKB_MATH1(asin) PKB_MATH1(acos) PKB_MATH1(atan) PKB_MATH1(sinh) PKB_MATH1(cosh)
PKB_MATH1(erf) PKB_MATH1(erfc) PKB_MATH1(cbrt) PKB_MATH1(rcbrt) PKB_MATH1(lgamma) PKB_MATH1(tgamma)
PKB_MATH2(fmod) PKB_MATH2(copysign) PKB_MATH2(atan2) PKB_MATH2(hypot) PKB_MATH2(remainder) PKB_MATH2(fdim)
PKB_HD double log(double); PKB_HD double pow(double, double); PKB_HD double tanh(double); PKB_HD double fma(double, double, double);
PKB_HD double fmax(double, double); PKB_HD double fmin(double, double); PKB_HD double rsqrt(double);
PKB_HD float ldexpf(float, int); PKB_HD double ldexp(double, int); PKB_HD float frexpf(float, int*);
PKB_HD float scalbnf(float, int); PKB_HD void sincosf(float, float*, float*); PKB_HD float sqrt(float);
PKB_HD float __logf(float); PKB_HD float __log2f(float); PKB_HD float __exp10f(float); PKB_HD float __powf(float, float);
PKB_HD float __sinf(float); PKB_HD float __cosf(float); PKB_HD float __tanf(float); PKB_HD void __sincosf(float, float*, float*);
PKB_HD float __frsqrt_rn(float); PKB_HD float __fsqrt_rn(float); PKB_HD float __fdiv_rn(float, float);
PKB_HD float __fmaf_rn(float, float, float); PKB_HD float __fsub_rn(float, float);
PKB_HD int __float2int_rn(float); PKB_HD int __float2int_rz(float); PKB_HD int __float2int_rd(float); PKB_HD int __float2int_ru(float);
PKB_HD unsigned __float2uint_rn(float); PKB_HD long long __float2ll_rn(float); PKB_HD float __int2float_rn(int);
PKB_HD float __ll2float_rn(long long); PKB_HD float __uint2float_rn(unsigned);
PKB_HD unsigned __double2hiint(double); PKB_HD unsigned __double2loint(double);
PKB_HD long long __double_as_longlong(double); PKB_HD double __longlong_as_double(long long);
template <class T> PKB_HD bool isnan(T); template <class T> PKB_HD bool isinf(T); template <class T> PKB_HD bool isfinite(T);
template <class T> PKB_HD bool signbit(T);
PKB_HD int abs(int); PKB_HD long long llabs(long long); PKB_HD int __mul24(int, int); PKB_HD int __mulhi(int, int);
PKB_HD unsigned __umulhi(unsigned, unsigned); PKB_HD unsigned __brev(unsigned); PKB_HD int __clzll(long long);
PKB_HD int __ffsll(long long); PKB_HD unsigned __byte_perm(unsigned, unsigned, unsigned);
PKB_HD unsigned __funnelshift_l(unsigned, unsigned, unsigned); PKB_HD unsigned __funnelshift_r(unsigned, unsigned, unsigned);
template <class T, class U> PKB_HD void gpuAtomicAdd(T*, U);  // ATen/cuda/Atomic.cuh
#define CUDART_INF_F __int_as_float(0x7f800000)
#define CUDART_NAN_F __int_as_float(0x7fffffff)
#define CUDART_INF __longlong_as_double(0x7ff0000000000000LL)
#define CUDART_MAX_NORMAL_F 3.402823466e38f
#define CUDART_PI_F 3.141592654f
#define INFINITY (__builtin_inff())
#define NAN (__builtin_nanf(""))
#define FLT_MAX 3.402823466e+38F
#define FLT_MIN 1.175494351e-38F
#define FLT_EPSILON 1.192092896e-07F

namespace std {
template <class E> class initializer_list {
  const E* first_; size_t len_;
 public:
  constexpr initializer_list() : first_(nullptr), len_(0) {}
  constexpr size_t size() const { return len_; }
  constexpr const E* begin() const { return first_; }
  constexpr const E* end() const { return first_ + len_; }
};
typedef ::size_t size_t;
typedef ::int64_t int64_t;
typedef ::uint64_t uint64_t;
typedef ::int32_t int32_t;
typedef ::uint32_t uint32_t;
typedef ::uintptr_t uintptr_t;
template <class T> PKB_HD const T& min(const T& a, const T& b) { return b < a ? b : a; }
template <class T> PKB_HD const T& max(const T& a, const T& b) { return a < b ? b : a; }
template <class T> struct remove_reference { typedef T type; };
template <class T> struct remove_reference<T&> { typedef T type; };
template <class T> typename remove_reference<T>::type&& move(T&& t);
template <class T> T&& forward(typename remove_reference<T>::type& t);
struct string {
  string(); string(const char*);
  const char* c_str() const;
  size_t size() const;
  string operator+(const string&) const;
};
string to_string(long long);
template <class T> struct vector {
  vector(); explicit vector(size_t n); vector(size_t n, const T& v);
  template <class It> vector(It, It);
  T& operator[](size_t); const T& operator[](size_t) const;
  T* data(); const T* data() const;
  size_t size() const; bool empty() const;
  void push_back(const T&); template <class... A> void emplace_back(A&&...);
  void resize(size_t); void reserve(size_t); void clear();
  T* begin(); T* end(); const T* begin() const; const T* end() const;
  T& back(); T& front();
};
template <class T, size_t N> struct array {
  T elems[N];
  PKB_HD T& operator[](size_t i) { return elems[i]; }
  PKB_HD const T& operator[](size_t i) const { return elems[i]; }
  PKB_HD T* data() { return elems; }
  PKB_HD constexpr size_t size() const { return N; }
};
template <class A, class B> struct pair { A first; B second; };
template <class K, class V> struct unordered_map {
  V& operator[](const K&); size_t count(const K&) const;
};
template <class K, class V> struct map { V& operator[](const K&); size_t count(const K&) const; };
template <class T> struct optional { bool has_value() const; T& value(); T& operator*(); };
template <class T> struct unique_ptr { T* get() const; T* operator->() const; };
template <class T> struct shared_ptr { T* get() const; T* operator->() const; };
struct runtime_error { runtime_error(const char*); runtime_error(const string&); };
struct mutex {};
template <class M> struct lock_guard { lock_guard(M&); };
template <class T> struct numeric_limits { static constexpr T max(); static constexpr T min(); static constexpr T lowest(); };
template <class T, class U> struct is_same { static constexpr bool value = false; };
template <class T> struct is_same<T, T> { static constexpr bool value = true; };
template <class T, T v> struct integral_constant { static constexpr T value = v; constexpr operator T() const { return v; } };
typedef integral_constant<bool, true> true_type; typedef integral_constant<bool, false> false_type;
template <size_t Len, size_t Align = 16> struct aligned_storage { struct type { alignas(Align) unsigned char data[Len]; }; };
template <bool B, class T = void> struct enable_if {}; template <class T> struct enable_if<true, T> { typedef T type; };
template <bool B, class T, class F> struct conditional { typedef T type; };
template <class T, class F> struct conditional<false, T, F> { typedef F type; };
template <class T> PKB_HD T abs(T); template <class T> PKB_HD bool isnan(T); template <class T> PKB_HD bool isinf(T);
template <class T> PKB_HD bool isfinite(T); template <class T> PKB_HD T ceil(T); template <class T> PKB_HD T floor(T);
template <class T> PKB_HD T sqrt(T); template <class T> PKB_HD T exp(T); template <class T> PKB_HD T log(T);
template <class T> PKB_HD T fabs(T); template <class T> PKB_HD T pow(T, T); template <class T> PKB_HD T round(T);
template <class T> struct is_same_pair;
}  // namespace std

// ---- CUDA runtime types ----
struct uint3 { unsigned int x, y, z; };
struct dim3 {
  unsigned int x, y, z;
  PKB_HD constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
  PKB_HD dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
};
#define PKB_VEC2(T, N) struct N##2 { T x, y; }; PKB_HD N##2 make_##N##2(T, T);
#define PKB_VEC4(T, N) struct __attribute__((aligned(16))) N##4 { T x, y, z, w; }; PKB_HD N##4 make_##N##4(T, T, T, T);
PKB_VEC2(float, float) PKB_VEC4(float, float)
PKB_VEC2(int, int) PKB_VEC4(int, int)
PKB_VEC2(unsigned int, uint) PKB_VEC4(unsigned int, uint)
PKB_VEC2(double, double) PKB_VEC4(double, double)
PKB_VEC2(long long, longlong) PKB_VEC4(long long, longlong)
PKB_VEC2(unsigned long long, ulonglong) PKB_VEC4(unsigned long long, ulonglong)
PKB_VEC2(long, long) PKB_VEC4(long, long) PKB_VEC2(unsigned long, ulong) PKB_VEC4(unsigned long, ulong)
PKB_VEC2(short, short) PKB_VEC4(short, short)
PKB_VEC2(unsigned short, ushort) PKB_VEC4(unsigned short, ushort)
PKB_VEC4(char, char) PKB_VEC4(unsigned char, uchar)
struct float3 { float x, y, z; }; struct int3 { int x, y, z; };
PKB_HD float3 make_float3(float, float, float);
PKB_HD uint3 make_uint3(unsigned, unsigned, unsigned);
PKB_HD dim3 make_dim3(unsigned, unsigned, unsigned);

typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;
typedef struct CUstream_st* CUstream;
typedef struct CUevent_st* CUevent;
typedef unsigned long long CUdeviceptr;
typedef int CUdevice;
typedef struct CUctx_st* CUcontext;
typedef struct CUmod_st* CUmodule;
typedef struct CUfunc_st* CUfunction;
typedef struct cudaGraph_st* cudaGraph_t;
typedef struct cudaGraphExec_st* cudaGraphExec_t;
typedef unsigned long long CUmemGenericAllocationHandle;
enum cudaError { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2,
                 cudaErrorNotReady = 600, cudaErrorPeerAccessAlreadyEnabled = 704 };
typedef enum cudaError cudaError_t;
enum CUresult { CUDA_SUCCESS = 0, CUDA_ERROR_INVALID_VALUE = 1 };
enum cudaMemcpyKind { cudaMemcpyHostToHost = 0, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2,
                      cudaMemcpyDeviceToDevice = 3, cudaMemcpyDefault = 4 };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
                         cudaFuncAttributePreferredSharedMemoryCarveout = 9 };
enum cudaDeviceAttr { cudaDevAttrMultiProcessorCount = 16, cudaDevAttrCooperativeLaunch = 95 };
enum cudaStreamCaptureStatus { cudaStreamCaptureStatusNone = 0, cudaStreamCaptureStatusActive = 1 };
#define cudaStreamNonBlocking 0x01
#define cudaStreamDefault 0x00
#define cudaEventDisableTiming 0x02
#define cudaEventDefault 0x00
#define cudaHostAllocDefault 0
#define cudaHostAllocMapped 2
#define cudaHostAllocPortable 1
#define cudaIpcMemLazyEnablePeerAccess 1
#define cudaMemAttachGlobal 1
struct cudaIpcMemHandle_t { char reserved[64]; };
struct cudaIpcEventHandle_t { char reserved[64]; };
struct cudaDeviceProp { char name[256]; int multiProcessorCount; size_t sharedMemPerBlock;
                        size_t sharedMemPerBlockOptin; int major; int minor; int maxThreadsPerBlock;
                        int cooperativeLaunch; int l2CacheSize; };
struct cudaFuncAttributes { int maxThreadsPerBlock; int numRegs; size_t sharedSizeBytes; };
struct cudaPointerAttributes { int type; int device; void* devicePointer; void* hostPointer; };
struct cudaLaunchConfig_t { dim3 gridDim; dim3 blockDim; size_t dynamicSmemBytes; cudaStream_t stream;
                            void* attrs; unsigned numAttrs; };

// The CUDA kernel-call expression `k<<<g, b, s, st>>>(...)` needs one of these to exist.
extern "C" unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem = 0,
                                                cudaStream_t stream = 0);
extern "C" cudaError_t cudaConfigureCall(dim3 gridDim, dim3 blockDim, size_t sharedMem = 0,
                                         cudaStream_t stream = 0);

extern "C" {
PKB_HD cudaError_t cudaGetLastError(void);
PKB_HD cudaError_t cudaPeekAtLastError(void);
PKB_HD const char* cudaGetErrorString(cudaError_t);
PKB_HD const char* cudaGetErrorName(cudaError_t);
cudaError_t cudaGetDevice(int*);
cudaError_t cudaSetDevice(int);
cudaError_t cudaGetDeviceCount(int*);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp*, int);
cudaError_t cudaDeviceGetAttribute(int*, cudaDeviceAttr, int);
cudaError_t cudaDeviceCanAccessPeer(int*, int, int);
cudaError_t cudaDeviceEnablePeerAccess(int, unsigned);
cudaError_t cudaDeviceDisablePeerAccess(int);
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes*, const void*);
cudaError_t cudaMalloc(void**, size_t);
cudaError_t cudaMallocHost(void**, size_t);
cudaError_t cudaMallocManaged(void**, size_t, unsigned = 1);
cudaError_t cudaMallocAsync(void**, size_t, cudaStream_t);
cudaError_t cudaHostAlloc(void**, size_t, unsigned);
cudaError_t cudaHostGetDevicePointer(void**, void*, unsigned);
cudaError_t cudaFree(void*);
cudaError_t cudaFreeHost(void*);
cudaError_t cudaFreeAsync(void*, cudaStream_t);
cudaError_t cudaMemset(void*, int, size_t);
cudaError_t cudaMemsetAsync(void*, int, size_t, cudaStream_t = 0);
cudaError_t cudaMemcpy(void*, const void*, size_t, cudaMemcpyKind);
cudaError_t cudaMemcpyAsync(void*, const void*, size_t, cudaMemcpyKind, cudaStream_t = 0);
cudaError_t cudaMemcpy2D(void*, size_t, const void*, size_t, size_t, size_t, cudaMemcpyKind);
cudaError_t cudaMemcpy2DAsync(void*, size_t, const void*, size_t, size_t, size_t, cudaMemcpyKind, cudaStream_t = 0);
cudaError_t cudaMemcpyPeer(void*, int, const void*, int, size_t);
cudaError_t cudaMemcpyPeerAsync(void*, int, const void*, int, size_t, cudaStream_t = 0);
cudaError_t cudaStreamCreate(cudaStream_t*);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t*, unsigned);
cudaError_t cudaStreamCreateWithPriority(cudaStream_t*, unsigned, int);
cudaError_t cudaStreamDestroy(cudaStream_t);
cudaError_t cudaStreamSynchronize(cudaStream_t);
cudaError_t cudaStreamQuery(cudaStream_t);
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned = 0);
cudaError_t cudaStreamIsCapturing(cudaStream_t, cudaStreamCaptureStatus*);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaEventCreate(cudaEvent_t*);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t*, unsigned);
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t = 0);
cudaError_t cudaEventSynchronize(cudaEvent_t);
cudaError_t cudaEventQuery(cudaEvent_t);
cudaError_t cudaEventElapsedTime(float*, cudaEvent_t, cudaEvent_t);
cudaError_t cudaEventDestroy(cudaEvent_t);
cudaError_t cudaLaunchKernel(const void*, dim3, dim3, void**, size_t, cudaStream_t);
cudaError_t cudaLaunchCooperativeKernel(const void*, dim3, dim3, void**, size_t, cudaStream_t);
cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t*, const void*, void**);
cudaError_t cudaFuncSetAttribute(const void*, cudaFuncAttribute, int);
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes*, const void*);
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int*, const void*, int, size_t);
cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t*, void*);
cudaError_t cudaIpcOpenMemHandle(void**, cudaIpcMemHandle_t, unsigned);
cudaError_t cudaIpcCloseMemHandle(void*);
cudaError_t cudaIpcGetEventHandle(cudaIpcEventHandle_t*, cudaEvent_t);
cudaError_t cudaIpcOpenEventHandle(cudaEvent_t*, cudaIpcEventHandle_t);
cudaError_t cudaStreamBeginCapture(cudaStream_t, int);
cudaError_t cudaStreamEndCapture(cudaStream_t, cudaGraph_t*);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t*, cudaGraph_t, unsigned long long = 0);
cudaError_t cudaGraphLaunch(cudaGraphExec_t, cudaStream_t);
cudaError_t cudaMemcpyToSymbol(const void*, const void*, size_t, size_t = 0, cudaMemcpyKind = cudaMemcpyHostToDevice);
cudaError_t cudaMemcpyToSymbolAsync(const void*, const void*, size_t, size_t, cudaMemcpyKind, cudaStream_t = 0);
cudaError_t cudaMemcpyFromSymbol(void*, const void*, size_t, size_t = 0, cudaMemcpyKind = cudaMemcpyDeviceToHost);
cudaError_t cudaGetSymbolAddress(void**, const void*);
// driver API
CUresult cuInit(unsigned);
CUresult cuGetErrorString(CUresult, const char**);
CUresult cuMemcpy(CUdeviceptr, CUdeviceptr, size_t);
CUresult cuMemcpyAsync(CUdeviceptr, CUdeviceptr, size_t, CUstream);
CUresult cuMemcpyPeer(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t);
CUresult cuMemcpyPeerAsync(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t, CUstream);
CUresult cuMemcpyDtoD(CUdeviceptr, CUdeviceptr, size_t);
CUresult cuMemcpyDtoDAsync(CUdeviceptr, CUdeviceptr, size_t, CUstream);
CUresult cuMemcpyHtoD(CUdeviceptr, const void*, size_t);
CUresult cuMemcpyDtoH(void*, CUdeviceptr, size_t);
CUresult cuMemcpyHtoDAsync(CUdeviceptr, const void*, size_t, CUstream);
CUresult cuMemcpyDtoHAsync(void*, CUdeviceptr, size_t, CUstream);
CUresult cuStreamWaitValue32(CUstream, CUdeviceptr, uint32_t, unsigned);
CUresult cuStreamWriteValue32(CUstream, CUdeviceptr, uint32_t, unsigned);
CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                        unsigned, CUstream, void**, void**);
CUresult cuLaunchCooperativeKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                                   unsigned, unsigned, CUstream, void**);
CUresult cuMulticastCreate(CUmemGenericAllocationHandle*, const void*);
CUresult cuMulticastBindMem(CUmemGenericAllocationHandle, size_t, CUmemGenericAllocationHandle, size_t, size_t, unsigned long long);
CUresult cuMulticastAddDevice(CUmemGenericAllocationHandle, CUdevice);
CUresult cuMemMap(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
CUresult cuMemAddressReserve(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long);
}
// The runtime's typed convenience overloads (T** instead of void**).
template <class T> cudaError_t cudaMalloc(T** p, size_t n) { return cudaMalloc((void**)p, n); }
template <class T> cudaError_t cudaMallocHost(T** p, size_t n) { return cudaMallocHost((void**)p, n); }
template <class T> cudaError_t cudaMallocManaged(T** p, size_t n, unsigned f = 1) { return cudaMallocManaged((void**)p, n, f); }
template <class T> cudaError_t cudaMallocAsync(T** p, size_t n, cudaStream_t s) { return cudaMallocAsync((void**)p, n, s); }
template <class T> cudaError_t cudaHostAlloc(T** p, size_t n, unsigned f) { return cudaHostAlloc((void**)p, n, f); }
template <class T> cudaError_t cudaHostGetDevicePointer(T** p, void* h, unsigned f) { return cudaHostGetDevicePointer((void**)p, h, f); }
template <class T> cudaError_t cudaIpcOpenMemHandle(T** p, cudaIpcMemHandle_t h, unsigned f) { return cudaIpcOpenMemHandle((void**)p, h, f); }
template <class T> cudaError_t cudaGetSymbolAddress(void** p, const T& sym);
template <class T> cudaError_t cudaLaunchKernel(T* f, dim3 g, dim3 b, void** a, size_t s, cudaStream_t st) { return cudaLaunchKernel((const void*)f, g, b, a, s, st); }
template <class T> cudaError_t cudaLaunchCooperativeKernel(T* f, dim3 g, dim3 b, void** a, size_t s, cudaStream_t st) { return cudaLaunchCooperativeKernel((const void*)f, g, b, a, s, st); }
template <class T> cudaError_t cudaFuncSetAttribute(T* f, cudaFuncAttribute a, int v) { return cudaFuncSetAttribute((const void*)f, a, v); }
template <class T> cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* n, T* f, int b, size_t s) { return cudaOccupancyMaxActiveBlocksPerMultiprocessor(n, (const void*)f, b, s); }

// TMA descriptors
struct CUtensorMap { alignas(64) unsigned long long opaque[16]; };
typedef CUtensorMap CUtensorMap_st;
enum CUtensorMapDataType { CU_TENSOR_MAP_DATA_TYPE_UINT8 = 0, CU_TENSOR_MAP_DATA_TYPE_FLOAT16 = 6,
                           CU_TENSOR_MAP_DATA_TYPE_FLOAT32 = 7, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 = 9 };
enum CUtensorMapInterleave { CU_TENSOR_MAP_INTERLEAVE_NONE = 0 };
enum CUtensorMapSwizzle { CU_TENSOR_MAP_SWIZZLE_NONE = 0, CU_TENSOR_MAP_SWIZZLE_32B, CU_TENSOR_MAP_SWIZZLE_64B,
                          CU_TENSOR_MAP_SWIZZLE_128B };
enum CUtensorMapL2promotion { CU_TENSOR_MAP_L2_PROMOTION_NONE = 0, CU_TENSOR_MAP_L2_PROMOTION_L2_128B = 2,
                              CU_TENSOR_MAP_L2_PROMOTION_L2_256B = 3 };
enum CUtensorMapFloatOOBfill { CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE = 0 };
extern "C" CUresult cuTensorMapEncodeTiled(CUtensorMap*, CUtensorMapDataType, uint32_t, void*, const uint64_t*,
                                           const uint64_t*, const uint32_t*, const uint32_t*,
                                           CUtensorMapInterleave, CUtensorMapSwizzle, CUtensorMapL2promotion,
                                           CUtensorMapFloatOOBfill);
extern "C" CUresult cuTensorMapEncodeIm2col(CUtensorMap*, ...);

// ---- device intrinsics ----
__device__ void __syncthreads(void);
__device__ int __syncthreads_count(int);
__device__ int __syncthreads_and(int);
__device__ int __syncthreads_or(int);
__device__ void __syncwarp(unsigned = 0xffffffffu);
__device__ void __threadfence(void);
__device__ void __threadfence_block(void);
__device__ void __threadfence_system(void);
__device__ void __trap(void);
__device__ void __nanosleep(unsigned);
__device__ long long clock64(void);
__device__ long long clock(void);
__device__ unsigned __activemask(void);
__device__ int __popc(unsigned); __device__ int __popcll(unsigned long long);
__device__ int __clz(int); __device__ int __ffs(int);
__device__ unsigned __ballot_sync(unsigned, int);
__device__ int __all_sync(unsigned, int); __device__ int __any_sync(unsigned, int);
__device__ unsigned __cvta_generic_to_shared(const void*);
__device__ bool __isGlobal(const void*); __device__ bool __isShared(const void*);
#define PKB_ATOMIC_ALL(NAME)                                                                    \
  template <class T, class U> __device__ T NAME(T* address, U val);                            \
  template <class T, class U> __device__ T NAME##_system(T* address, U val);                   \
  template <class T, class U> __device__ T NAME##_block(T* address, U val);
PKB_ATOMIC_ALL(atomicAdd) PKB_ATOMIC_ALL(atomicSub) PKB_ATOMIC_ALL(atomicExch)
PKB_ATOMIC_ALL(atomicMax) PKB_ATOMIC_ALL(atomicMin) PKB_ATOMIC_ALL(atomicAnd)
PKB_ATOMIC_ALL(atomicOr) PKB_ATOMIC_ALL(atomicXor) PKB_ATOMIC_ALL(atomicInc) PKB_ATOMIC_ALL(atomicDec)
template <class T, class U, class V> __device__ T atomicCAS(T* address, U compare, V val);
template <class T, class U, class V> __device__ T atomicCAS_system(T* address, U compare, V val);
template <class T, class U, class V> __device__ T atomicCAS_block(T* address, U compare, V val);
template <class T> __device__ T __ldg(const T*);
template <class T> __device__ T __ldcg(const T*);
template <class T> __device__ T __ldca(const T*);
template <class T> __device__ T __ldcs(const T*);
template <class T> __device__ T __ldlu(const T*);
template <class T> __device__ T __ldcv(const T*);
template <class T> __device__ void __stcg(T*, T);
template <class T> __device__ void __stcs(T*, T);
template <class T> __device__ void __stwt(T*, T);
template <class T> __device__ void __stwb(T*, T);
template <class T> __device__ T __shfl_sync(unsigned, T, int, int = 32);
template <class T> __device__ T __shfl_xor_sync(unsigned, T, int, int = 32);
template <class T> __device__ T __shfl_up_sync(unsigned, T, unsigned, int = 32);
template <class T> __device__ T __shfl_down_sync(unsigned, T, unsigned, int = 32);
template <class T> __device__ T __reduce_add_sync(unsigned, T);
__device__ float __int_as_float(int); __device__ int __float_as_int(float);
__device__ unsigned __float_as_uint(float); __device__ float __uint_as_float(unsigned);
__device__ float __saturatef(float); __device__ float __frcp_rn(float);
__device__ float __fadd_rn(float, float); __device__ float __fmul_rn(float, float);

// ---- half and bfloat16 ----
struct __half {
  unsigned short __x;
  __half() = default; PKB_HD __half(float); PKB_HD __half(double); PKB_HD __half(int);
  PKB_HD operator float() const;
  PKB_HD __half& operator+=(const __half&); PKB_HD __half& operator*=(const __half&);
};
struct __half2 { __half x, y; __half2() = default; PKB_HD __half2(__half, __half); };
struct __nv_bfloat16 {
  unsigned short __x;
  __nv_bfloat16() = default; PKB_HD __nv_bfloat16(float); PKB_HD __nv_bfloat16(double); PKB_HD __nv_bfloat16(int);
  PKB_HD operator float() const;
  PKB_HD __nv_bfloat16& operator+=(const __nv_bfloat16&); PKB_HD __nv_bfloat16& operator*=(const __nv_bfloat16&);
};
struct __nv_bfloat162 { __nv_bfloat16 x, y; __nv_bfloat162() = default; PKB_HD __nv_bfloat162(__nv_bfloat16, __nv_bfloat16); };
typedef __half half; typedef __half2 half2;
typedef __nv_bfloat16 nv_bfloat16; typedef __nv_bfloat162 nv_bfloat162;
PKB_HD __half operator+(const __half&, const __half&); PKB_HD __half operator*(const __half&, const __half&);
PKB_HD __half operator-(const __half&, const __half&);
PKB_HD __nv_bfloat16 operator+(const __nv_bfloat16&, const __nv_bfloat16&);
PKB_HD __nv_bfloat16 operator*(const __nv_bfloat16&, const __nv_bfloat16&);
PKB_HD __nv_bfloat16 operator-(const __nv_bfloat16&, const __nv_bfloat16&);
PKB_HD float __half2float(__half); PKB_HD __half __float2half(float); PKB_HD __half __float2half_rn(float);
PKB_HD float __bfloat162float(__nv_bfloat16); PKB_HD __nv_bfloat16 __float2bfloat16(float);
PKB_HD __nv_bfloat16 __float2bfloat16_rn(float);
PKB_HD float2 __half22float2(__half2); PKB_HD __half2 __float22half2_rn(float2);
PKB_HD float2 __bfloat1622float2(__nv_bfloat162); PKB_HD __nv_bfloat162 __float22bfloat162_rn(float2);
PKB_HD __half2 __floats2half2_rn(float, float); PKB_HD __nv_bfloat162 __floats2bfloat162_rn(float, float);
PKB_HD __half2 __hadd2(__half2, __half2); PKB_HD __nv_bfloat162 __hadd2(__nv_bfloat162, __nv_bfloat162);
PKB_HD __half __hadd(__half, __half); PKB_HD __nv_bfloat16 __hadd(__nv_bfloat16, __nv_bfloat16);
PKB_HD __half2 __hmul2(__half2, __half2); PKB_HD __half __hmul(__half, __half);
PKB_HD __half2 __halves2half2(__half, __half); PKB_HD __half __low2half(__half2); PKB_HD __half __high2half(__half2);
PKB_HD __nv_bfloat16 __low2bfloat16(__nv_bfloat162); PKB_HD __nv_bfloat16 __high2bfloat16(__nv_bfloat162);
typedef unsigned char __nv_fp8_e4m3; typedef unsigned char __nv_fp8_e5m2;
typedef unsigned char __nv_fp8_storage_t; typedef unsigned short __nv_fp8x2_storage_t; typedef unsigned int __nv_fp8x4_storage_t;
enum __nv_saturation_t { __NV_NOSAT = 0, __NV_SATFINITE = 1 };
enum __nv_fp8_interpretation_t { __NV_E4M3 = 0, __NV_E5M2 = 1 };
PKB_HD __nv_fp8_storage_t __nv_cvt_float_to_fp8(float, __nv_saturation_t, __nv_fp8_interpretation_t);
PKB_HD __nv_fp8x2_storage_t __nv_cvt_float2_to_fp8x2(float2, __nv_saturation_t, __nv_fp8_interpretation_t);
PKB_HD __half __nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t, __nv_fp8_interpretation_t);
// tensor-core fragments (nvcuda::wmma): enough to parse kernels that use them
namespace nvcuda { namespace wmma {
struct matrix_a {}; struct matrix_b {}; struct accumulator {}; struct row_major {}; struct col_major {};
enum layout_t { mem_row_major, mem_col_major };
namespace precision { struct tf32 {}; }
template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment { T x[8]; static constexpr int num_elements = 8; };
template <class F, class P> PKB_HD void load_matrix_sync(F&, const P*, unsigned);
template <class F, class P> PKB_HD void load_matrix_sync(F&, const P*, unsigned, layout_t);
template <class F, class P> PKB_HD void store_matrix_sync(P*, const F&, unsigned, layout_t);
template <class F, class V> PKB_HD void fill_fragment(F&, const V&);
template <class D, class A, class B, class C> PKB_HD void mma_sync(D&, const A&, const B&, const C&);
} }

// ---- cooperative groups ----
namespace cooperative_groups {
struct thread_group { __device__ void sync() const; __device__ unsigned size() const;
                      __device__ unsigned thread_rank() const; __device__ unsigned num_threads() const; };
struct grid_group : thread_group { __device__ bool is_valid() const; __device__ unsigned long long block_rank() const;
                                   __device__ unsigned long long num_blocks() const; __device__ dim3 group_dim() const; };
struct thread_block : thread_group { __device__ dim3 group_index() const; __device__ dim3 thread_index() const;
                                     __device__ dim3 group_dim() const; };
struct cluster_group : thread_group { __device__ unsigned block_rank() const; __device__ void* map_shared_rank(void*, unsigned) const; };
template <unsigned N> struct thread_block_tile : thread_group {
  template <class T> __device__ T shfl(T, int) const; template <class T> __device__ T shfl_down(T, unsigned) const;
  template <class T> __device__ T shfl_xor(T, unsigned) const; __device__ unsigned meta_group_rank() const; };
struct coalesced_group : thread_group {};
__device__ grid_group this_grid();
__device__ thread_block this_thread_block();
__device__ cluster_group this_cluster();
__device__ coalesced_group coalesced_threads();
template <unsigned N, class G> __device__ thread_block_tile<N> tiled_partition(const G&);
template <class G> __device__ void sync(const G&);
template <class T> struct plus { __device__ T operator()(T, T) const; };
template <class T> struct greater { __device__ T operator()(T, T) const; };
template <class G, class T, class Op> __device__ T reduce(const G&, T, Op);
template <class G, class T, class Op> __device__ T inclusive_scan(const G&, T, Op);
template <class G> __device__ void wait(const G&);
template <class G, class T> __device__ void memcpy_async(const G&, T*, const T*, size_t);
namespace details {}
}  // namespace cooperative_groups

// ---- libcu++ (cuda::atomic_ref, barriers, memcpy_async) ----
namespace cuda {
enum thread_scope { thread_scope_system = 0, thread_scope_device = 1, thread_scope_block = 2, thread_scope_thread = 3 };
namespace std {
enum memory_order { memory_order_relaxed, memory_order_consume, memory_order_acquire, memory_order_release,
                    memory_order_acq_rel, memory_order_seq_cst };
template <class T, thread_scope S = thread_scope_system> struct atomic_ref {
  PKB_HD explicit atomic_ref(T&);
  PKB_HD T load(memory_order = memory_order_seq_cst) const;
  PKB_HD void store(T, memory_order = memory_order_seq_cst) const;
  PKB_HD T exchange(T, memory_order = memory_order_seq_cst) const;
  PKB_HD bool compare_exchange_strong(T&, T, memory_order = memory_order_seq_cst) const;
  PKB_HD bool compare_exchange_weak(T&, T, memory_order = memory_order_seq_cst) const;
  PKB_HD T fetch_add(T, memory_order = memory_order_seq_cst) const;
  PKB_HD T fetch_sub(T, memory_order = memory_order_seq_cst) const;
  PKB_HD T fetch_or(T, memory_order = memory_order_seq_cst) const;
  PKB_HD T fetch_and(T, memory_order = memory_order_seq_cst) const;
  PKB_HD T fetch_max(T, memory_order = memory_order_seq_cst) const;
  PKB_HD T fetch_min(T, memory_order = memory_order_seq_cst) const;
  PKB_HD void wait(T, memory_order = memory_order_seq_cst) const;
  PKB_HD void notify_all() const; PKB_HD void notify_one() const;
};
template <class T, thread_scope S = thread_scope_system> struct atomic {
  PKB_HD T load(memory_order = memory_order_seq_cst) const;
  PKB_HD void store(T, memory_order = memory_order_seq_cst);
  PKB_HD T fetch_add(T, memory_order = memory_order_seq_cst);
  PKB_HD T exchange(T, memory_order = memory_order_seq_cst);
};
PKB_HD void atomic_thread_fence(memory_order, thread_scope = thread_scope_system);
template <class T> PKB_HD const T& min(const T& a, const T& b) { return b < a ? b : a; }
template <class T> PKB_HD const T& max(const T& a, const T& b) { return a < b ? b : a; }
}  // namespace std
using std::memory_order;
using std::memory_order_relaxed; using std::memory_order_acquire; using std::memory_order_release;
using std::memory_order_acq_rel; using std::memory_order_seq_cst; using std::memory_order_consume;
template <class T, thread_scope S = thread_scope_system> using atomic_ref = std::atomic_ref<T, S>;
template <class T, thread_scope S = thread_scope_system> using atomic = std::atomic<T, S>;
PKB_HD void atomic_thread_fence(memory_order, thread_scope = thread_scope_system);
template <thread_scope S = thread_scope_system> struct barrier {
  struct arrival_token {};
  PKB_HD barrier(long = 0);
  PKB_HD arrival_token arrive(long = 1);
  PKB_HD void wait(arrival_token&&) const;
  PKB_HD void arrive_and_wait();
};
template <class T, thread_scope S = thread_scope_system> PKB_HD void init(barrier<S>*, long);
template <size_t N> struct aligned_size_t { size_t value; PKB_HD aligned_size_t(size_t v) : value(v) {} };
template <class B, class... R> PKB_HD void memcpy_async(void*, const void*, size_t, B&);
template <class G, class B, class... R> PKB_HD void memcpy_async(const G&, void*, const void*, size_t, B&);
namespace device {
template <class B> __device__ void memcpy_async_tx(void*, const void*, size_t, B&);
template <class B> __device__ typename B::arrival_token barrier_arrive_tx(B&, long, long);
namespace experimental {
__device__ void cp_async_bulk_global_to_shared(void*, const void*, int, void*);
__device__ void cp_async_bulk_shared_to_global(void*, const void*, int);
__device__ void cp_async_bulk_tensor_2d_global_to_shared(void*, const CUtensorMap*, int, int, void*);
__device__ void cp_async_bulk_tensor_2d_shared_to_global(const CUtensorMap*, int, int, const void*);
__device__ void cp_async_bulk_commit_group();
template <int N> __device__ void cp_async_bulk_wait_group_read();
__device__ void fence_proxy_async_shared_cta();
}  // namespace experimental
}  // namespace device
struct pipeline_shared_state {};
}  // namespace cuda

// ---- NVSHMEM ----
typedef int nvshmem_team_t;
#define NVSHMEM_TEAM_WORLD 0
#define NVSHMEM_CMP_EQ 0
#define NVSHMEM_CMP_NE 1
#define NVSHMEM_CMP_GE 5
#define NVSHMEM_SIGNAL_SET 9
#define NVSHMEM_SIGNAL_ADD 10
#define NVSHMEMX_INIT_WITH_UNIQUEID 4
struct nvshmemx_init_attr_t { int dummy; };
struct nvshmemx_uniqueid_t { char internal[128]; };
extern "C" {
void nvshmem_init(void); void nvshmem_finalize(void);
int nvshmemx_init_attr(unsigned, nvshmemx_init_attr_t*);
int nvshmemx_get_uniqueid(nvshmemx_uniqueid_t*);
int nvshmemx_set_attr_uniqueid_args(int, int, nvshmemx_uniqueid_t*, nvshmemx_init_attr_t*);
PKB_HD int nvshmem_my_pe(void); PKB_HD int nvshmem_n_pes(void);
int nvshmem_team_my_pe(nvshmem_team_t); int nvshmem_team_n_pes(nvshmem_team_t);
void* nvshmem_malloc(size_t); void* nvshmem_align(size_t, size_t); void* nvshmem_calloc(size_t, size_t);
void nvshmem_free(void*);
PKB_HD void* nvshmem_ptr(const void*, int);
PKB_HD void nvshmem_putmem(void*, const void*, size_t, int);
PKB_HD void nvshmem_getmem(void*, const void*, size_t, int);
PKB_HD void nvshmem_putmem_nbi(void*, const void*, size_t, int);
PKB_HD void nvshmem_getmem_nbi(void*, const void*, size_t, int);
PKB_HD void nvshmem_putmem_signal(void*, const void*, size_t, uint64_t*, uint64_t, int, int);
PKB_HD void nvshmem_putmem_signal_nbi(void*, const void*, size_t, uint64_t*, uint64_t, int, int);
PKB_HD void nvshmem_float_put(float*, const float*, size_t, int);
PKB_HD void nvshmem_float_get(float*, const float*, size_t, int);
PKB_HD void nvshmem_float_put_nbi(float*, const float*, size_t, int);
PKB_HD void nvshmem_float_get_nbi(float*, const float*, size_t, int);
PKB_HD void nvshmem_float_p(float*, float, int); PKB_HD float nvshmem_float_g(const float*, int);
PKB_HD void nvshmem_int_p(int*, int, int); PKB_HD int nvshmem_int_g(const int*, int);
PKB_HD void nvshmem_uint64_p(uint64_t*, uint64_t, int);
PKB_HD void nvshmem_barrier_all(void); PKB_HD void nvshmem_sync_all(void);
PKB_HD void nvshmem_barrier(nvshmem_team_t); PKB_HD void nvshmem_team_sync(nvshmem_team_t);
PKB_HD void nvshmem_quiet(void); PKB_HD void nvshmem_fence(void);
PKB_HD uint64_t nvshmem_signal_wait_until(uint64_t*, int, uint64_t);
PKB_HD void nvshmem_uint64_wait_until(uint64_t*, int, uint64_t);
PKB_HD void nvshmem_int_wait_until(int*, int, int);
PKB_HD void nvshmemx_signal_op(uint64_t*, uint64_t, int, int);
PKB_HD uint64_t nvshmem_signal_fetch(const uint64_t*);
__device__ void nvshmemx_putmem_block(void*, const void*, size_t, int);
__device__ void nvshmemx_getmem_block(void*, const void*, size_t, int);
__device__ void nvshmemx_putmem_warp(void*, const void*, size_t, int);
__device__ void nvshmemx_getmem_warp(void*, const void*, size_t, int);
__device__ void nvshmemx_putmem_nbi_block(void*, const void*, size_t, int);
__device__ void nvshmemx_getmem_nbi_block(void*, const void*, size_t, int);
__device__ void nvshmemx_putmem_nbi_warp(void*, const void*, size_t, int);
__device__ void nvshmemx_getmem_nbi_warp(void*, const void*, size_t, int);
__device__ void nvshmemx_putmem_signal_block(void*, const void*, size_t, uint64_t*, uint64_t, int, int);
__device__ void nvshmemx_putmem_signal_nbi_block(void*, const void*, size_t, uint64_t*, uint64_t, int, int);
__device__ void nvshmemx_putmem_signal_warp(void*, const void*, size_t, uint64_t*, uint64_t, int, int);
__device__ void nvshmemx_putmem_signal_nbi_warp(void*, const void*, size_t, uint64_t*, uint64_t, int, int);
__device__ void nvshmemx_float_put_block(float*, const float*, size_t, int);
__device__ void nvshmemx_float_put_nbi_block(float*, const float*, size_t, int);
__device__ void nvshmemx_float_get_block(float*, const float*, size_t, int);
__device__ void nvshmemx_barrier_all_block(void); __device__ void nvshmemx_barrier_all_warp(void);
__device__ void nvshmemx_sync_all_block(void);
void nvshmemx_barrier_all_on_stream(cudaStream_t); void nvshmemx_quiet_on_stream(cudaStream_t);
void nvshmemx_putmem_on_stream(void*, const void*, size_t, int, cudaStream_t);
void nvshmemx_getmem_on_stream(void*, const void*, size_t, int, cudaStream_t);
int nvshmemx_collective_launch(const void*, dim3, dim3, void**, size_t, cudaStream_t);
}

// ---- torch / ATen / c10 / pybind11 ----
namespace c10 {
enum class ScalarType : signed char { Byte, Char, Short, Int, Long, Half, Float, Double, ComplexHalf,
                                      ComplexFloat, ComplexDouble, Bool, QInt8, QUInt8, QInt32, BFloat16,
                                      Float8_e5m2 = 23, Float8_e4m3fn = 24, UInt64 = 27, UInt32 = 28 };
// c10's types convert to and from CUDA's (they do in c10/util/Half.h and BFloat16.h)
struct Half { unsigned short x; Half() = default; PKB_HD Half(float); PKB_HD Half(__half); PKB_HD operator float() const;
              PKB_HD operator __half() const; };
struct BFloat16 { unsigned short x; BFloat16() = default; PKB_HD BFloat16(float); PKB_HD BFloat16(__nv_bfloat16);
                  PKB_HD operator float() const; PKB_HD operator __nv_bfloat16() const; };
struct Float8_e4m3fn { unsigned char x; Float8_e4m3fn() = default; PKB_HD Float8_e4m3fn(float); PKB_HD operator float() const; };
struct Float8_e5m2 { unsigned char x; Float8_e5m2() = default; PKB_HD Float8_e5m2(float); PKB_HD operator float() const; };
template <class T> struct complex { T real_, imag_; PKB_HD complex(); PKB_HD complex(T, T); PKB_HD T real() const; PKB_HD T imag() const; };
struct Device { Device(int); int index() const; bool is_cuda() const; };
struct TypeMeta { ScalarType toScalarType() const; size_t itemsize() const; bool operator==(const TypeMeta&) const;
                  bool operator!=(const TypeMeta&) const; TypeMeta(); TypeMeta(ScalarType); };
bool operator==(const TypeMeta&, ScalarType); bool operator!=(const TypeMeta&, ScalarType);
struct IntArrayRef { IntArrayRef(); template <class T> IntArrayRef(const T&); IntArrayRef(std::initializer_list<int64_t>);
                     size_t size() const; int64_t operator[](size_t) const; };
struct TensorOptions {
  TensorOptions(); TensorOptions(ScalarType); TensorOptions(Device);
  TensorOptions dtype(ScalarType) const; TensorOptions dtype(TypeMeta) const; TensorOptions device(Device) const;
  TensorOptions device(int, int = 0) const; TensorOptions requires_grad(bool) const;
  TensorOptions pinned_memory(bool) const;
};
const char* toString(ScalarType);
size_t elementSize(ScalarType);
namespace cuda {
struct CUDAStream {
  cudaStream_t stream() const; operator cudaStream_t() const; int device_index() const;
};
CUDAStream getCurrentCUDAStream(int device = -1);
CUDAStream getDefaultCUDAStream(int device = -1);
CUDAStream getStreamFromPool(bool high_priority = false, int device = -1);
void setCurrentCUDAStream(CUDAStream);
void device_synchronize();
struct CUDAGuard { explicit CUDAGuard(int); explicit CUDAGuard(Device); };
struct OptionalCUDAGuard { OptionalCUDAGuard(); explicit OptionalCUDAGuard(Device); };
struct CUDAStreamGuard { explicit CUDAStreamGuard(CUDAStream); };
}  // namespace cuda
}  // namespace c10
namespace at {
using c10::ScalarType; using c10::Half; using c10::BFloat16; using c10::TensorOptions; using c10::Device;
using c10::Float8_e4m3fn; using c10::Float8_e5m2;
constexpr ScalarType kFloat8_e4m3fn = ScalarType::Float8_e4m3fn; constexpr ScalarType kFloat8_e5m2 = ScalarType::Float8_e5m2;
using c10::IntArrayRef;
constexpr ScalarType kFloat = ScalarType::Float; constexpr ScalarType kFloat32 = ScalarType::Float;
constexpr ScalarType kHalf = ScalarType::Half; constexpr ScalarType kFloat16 = ScalarType::Half;
constexpr ScalarType kBFloat16 = ScalarType::BFloat16; constexpr ScalarType kDouble = ScalarType::Double;
constexpr ScalarType kInt = ScalarType::Int; constexpr ScalarType kInt32 = ScalarType::Int;
constexpr ScalarType kLong = ScalarType::Long; constexpr ScalarType kInt64 = ScalarType::Long;
constexpr ScalarType kByte = ScalarType::Byte; constexpr ScalarType kUInt8 = ScalarType::Byte;
constexpr ScalarType kBool = ScalarType::Bool; constexpr ScalarType kChar = ScalarType::Char;
constexpr ScalarType kUInt64 = ScalarType::UInt64;
enum DeviceType { kCPU = 0, kCUDA = 1 };
struct Scalar { Scalar(); Scalar(double); Scalar(long long); Scalar(int); Scalar(float);
                template <class T> T to() const; double toDouble() const; long long toLong() const; };
struct Tensor {
  Tensor();
  template <class T> T* data_ptr() const;
  void* data_ptr() const;
  template <class T> T* mutable_data_ptr() const;
  template <class T> const T* const_data_ptr() const;
  void* mutable_data_ptr() const; const void* const_data_ptr() const;
  int64_t numel() const; int64_t size(int64_t) const; int64_t stride(int64_t) const;
  IntArrayRef sizes() const; IntArrayRef strides() const; int64_t dim() const; int64_t ndimension() const;
  int64_t element_size() const; size_t nbytes() const; int64_t storage_offset() const;
  TensorOptions options() const; c10::TypeMeta dtype() const; ScalarType scalar_type() const;
  Device device() const; int get_device() const;
  bool is_cuda() const; bool is_contiguous() const; bool defined() const;
  Tensor contiguous() const; Tensor clone() const; Tensor view(IntArrayRef) const; Tensor reshape(IntArrayRef) const;
  Tensor to(ScalarType) const; Tensor to(Device) const; Tensor& copy_(const Tensor&, bool = false);
  Tensor& zero_(); Tensor& fill_(Scalar); Tensor& add_(const Tensor&); Tensor& mul_(Scalar); Tensor& div_(Scalar);
  Tensor narrow(int64_t, int64_t, int64_t) const; Tensor slice(int64_t, int64_t, int64_t) const;
  Tensor select(int64_t, int64_t) const; Tensor flatten() const; Tensor t() const; Tensor transpose(int64_t, int64_t) const;
  Tensor cpu() const; Tensor cuda() const; Tensor sum() const; Tensor float_() const;
  Tensor operator[](int64_t) const; Scalar item() const; template <class T> T item() const;
  Tensor operator+(const Tensor&) const; Tensor operator*(const Tensor&) const; Tensor operator-(const Tensor&) const;
  Tensor operator/(Scalar) const; Tensor operator*(Scalar) const;
  Tensor& operator+=(const Tensor&); Tensor& operator*=(Scalar);
};
Tensor empty(IntArrayRef, TensorOptions = {}); Tensor empty_like(const Tensor&, TensorOptions = {});
Tensor zeros(IntArrayRef, TensorOptions = {}); Tensor zeros_like(const Tensor&, TensorOptions = {});
Tensor ones(IntArrayRef, TensorOptions = {}); Tensor ones_like(const Tensor&, TensorOptions = {});
Tensor full(IntArrayRef, Scalar, TensorOptions = {}); Tensor empty_strided(IntArrayRef, IntArrayRef, TensorOptions = {});
Tensor from_blob(void*, IntArrayRef, TensorOptions = {});
template <class T> Tensor tensor(const std::vector<T>&); template <class T, class O> Tensor tensor(const std::vector<T>&, O);
Tensor matmul(const Tensor&, const Tensor&); Tensor mm(const Tensor&, const Tensor&);
Tensor cat(const std::vector<Tensor>&, int64_t = 0); Tensor stack(const std::vector<Tensor>&, int64_t = 0);
Tensor add(const Tensor&, const Tensor&); Tensor relu(const Tensor&);
namespace cuda {
using c10::cuda::CUDAStream; using c10::cuda::getCurrentCUDAStream; using c10::cuda::getDefaultCUDAStream;
using c10::cuda::getStreamFromPool; using c10::cuda::setCurrentCUDAStream; using c10::cuda::CUDAStreamGuard;
using c10::cuda::device_synchronize;
cudaDeviceProp* getCurrentDeviceProperties();
struct CUDAEvent { void record(CUDAStream); void block(CUDAStream); void synchronize() const; };
}  // namespace cuda
}  // namespace at
namespace torch {
using namespace at;
using at::Tensor;
namespace dtype_tags {}
TensorOptions dtype(ScalarType);
TensorOptions device(Device);
}  // namespace torch
#define TORCH_CHECK(cond, ...) ((void)(cond))
#define TORCH_INTERNAL_ASSERT(cond, ...) ((void)(cond))
#define AT_ASSERT(cond, ...) ((void)(cond))
#define C10_CUDA_CHECK(expr) ((void)(expr))
#define C10_CUDA_KERNEL_LAUNCH_CHECK() ((void)0)
#define CHECK_CUDA(x) ((void)(x))
#define CHECK_CONTIGUOUS(x) ((void)(x))
#define CHECK_INPUT(x) ((void)(x))
// The dispatch macros run their last argument (a lambda) with scalar_t bound; keep the lambda so
// its body is parsed like ordinary host code.
#define PKB_DISPATCH_BODY(...) [&] { using scalar_t = float; return __VA_ARGS__(); }()
#define AT_DISPATCH_FLOATING_TYPES(TYPE, NAME, ...) PKB_DISPATCH_BODY(__VA_ARGS__)
#define AT_DISPATCH_FLOATING_TYPES_AND_HALF(TYPE, NAME, ...) PKB_DISPATCH_BODY(__VA_ARGS__)
#define AT_DISPATCH_FLOATING_TYPES_AND(X, TYPE, NAME, ...) PKB_DISPATCH_BODY(__VA_ARGS__)
#define AT_DISPATCH_FLOATING_TYPES_AND2(X, Y, TYPE, NAME, ...) PKB_DISPATCH_BODY(__VA_ARGS__)
#define AT_DISPATCH_REDUCED_FLOATING_TYPES(TYPE, NAME, ...) PKB_DISPATCH_BODY(__VA_ARGS__)
#define AT_DISPATCH_ALL_TYPES(TYPE, NAME, ...) PKB_DISPATCH_BODY(__VA_ARGS__)
#define AT_DISPATCH_ALL_TYPES_AND(X, TYPE, NAME, ...) PKB_DISPATCH_BODY(__VA_ARGS__)
#define AT_DISPATCH_INTEGRAL_TYPES(TYPE, NAME, ...) PKB_DISPATCH_BODY(__VA_ARGS__)
#define AT_DISPATCH_SWITCH(TYPE, NAME, ...) [&] { using scalar_t = float; }()
#define AT_DISPATCH_CASE(T, ...) __VA_ARGS__
namespace pybind11 {
struct handle {}; struct object : handle {};
struct arg { arg(const char*); template <class T> arg& operator=(const T&); };
struct module_ {
  template <class F, class... Extra> module_& def(const char*, F&&, const Extra&...);
  module_ def_submodule(const char*, const char* = nullptr);
  template <class T> module_& attr(const char*);
};
typedef module_ module;
struct gil_scoped_release {}; struct gil_scoped_acquire {};
template <class T> struct class_ { class_(module_&, const char*); template <class F, class... E> class_& def(const char*, F&&, const E&...); };
}  // namespace pybind11
namespace py = pybind11;
#define PYBIND11_MODULE(name, m) void pkb_pybind11_init_##name(::pybind11::module_& m)
#define TORCH_EXTENSION_NAME pkb_extension
#define TORCH_LIBRARY(ns, m) void pkb_torch_library_##ns(::pybind11::module_& m)
#define TORCH_LIBRARY_IMPL(ns, k, m) void pkb_torch_library_impl_##ns##_##k(::pybind11::module_& m)

// ---- cuBLAS / cuBLASLt (what a GEMM call needs to parse; operands stay typed pointers) ----
typedef struct cublasContext* cublasHandle_t;
typedef struct cublasLtContext* cublasLtHandle_t;
typedef struct cublasLtMatmulDescOpaque_t* cublasLtMatmulDesc_t;
typedef struct cublasLtMatrixLayoutOpaque_t* cublasLtMatrixLayout_t;
typedef struct cublasLtMatmulPreferenceOpaque_t* cublasLtMatmulPreference_t;
struct cublasLtMatmulAlgo_t { uint64_t data[8]; };
struct cublasLtMatmulHeuristicResult_t { cublasLtMatmulAlgo_t algo; size_t workspaceSize; int state; float wavesCount; int reserved[4]; };
enum cublasStatus_t { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_NOT_INITIALIZED = 1, CUBLAS_STATUS_NOT_SUPPORTED = 15 };
enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 };
enum cublasGemmAlgo_t { CUBLAS_GEMM_DEFAULT = -1, CUBLAS_GEMM_DEFAULT_TENSOR_OP = 99 };
enum cublasMath_t { CUBLAS_DEFAULT_MATH = 0, CUBLAS_TENSOR_OP_MATH = 1, CUBLAS_TF32_TENSOR_OP_MATH = 3 };
enum cublasComputeType_t { CUBLAS_COMPUTE_16F = 64, CUBLAS_COMPUTE_32F = 68, CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
                           CUBLAS_COMPUTE_32F_FAST_16BF = 75 };
enum cublasPointerMode_t { CUBLAS_POINTER_MODE_HOST = 0, CUBLAS_POINTER_MODE_DEVICE = 1 };
enum cublasLtMatmulDescAttributes_t { CUBLASLT_MATMUL_DESC_TRANSA = 3, CUBLASLT_MATMUL_DESC_TRANSB = 4,
                                      CUBLASLT_MATMUL_DESC_EPILOGUE = 7, CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8 };
enum cublasLtMatmulPreferenceAttributes_t { CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1 };
typedef int cudaDataType; typedef int cudaDataType_t;
enum pkb_cublas_data_type { CUDA_R_16F = 2, CUDA_R_32F = 0, CUDA_R_64F = 1, CUDA_R_16BF = 14, CUDA_R_8F_E4M3 = 28,
                            CUDA_R_8F_E5M2 = 29, CUDA_R_8I = 3, CUDA_R_32I = 10 };
cublasStatus_t cublasCreate(cublasHandle_t*); cublasStatus_t cublasDestroy(cublasHandle_t);
cublasStatus_t cublasSetStream(cublasHandle_t, cudaStream_t); cublasStatus_t cublasSetMathMode(cublasHandle_t, int);
cublasStatus_t cublasSetPointerMode(cublasHandle_t, cublasPointerMode_t);
cublasStatus_t cublasSetWorkspace(cublasHandle_t, void*, size_t);
// enum-typed arguments are plain int here: models pass CUDA_R_32F where a compute type is due.
cublasStatus_t cublasGemmEx(cublasHandle_t, int, int, int, int, int, const void*, const void*, int, int,
                            const void*, int, int, const void*, void*, int, int, int, int);
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t, int, int, int, int, int, const void*, const void*, int, int,
                                          long long, const void*, int, int, long long, const void*, void*, int, int,
                                          long long, int, int, int);
cublasStatus_t cublasGemmBatchedEx(cublasHandle_t, int, int, int, int, int, const void*, const void* const*, int, int,
                                   const void* const*, int, int, const void*, void* const*, int, int, int, int, int);
cublasStatus_t cublasSgemm(cublasHandle_t, int, int, int, int, int, const float*, const float*, int, const float*, int,
                           const float*, float*, int);
cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t, int, int, int, int, int, const float*, const float*, int,
                                         long long, const float*, int, long long, const float*, float*, int, long long, int);
cublasStatus_t cublasLtCreate(cublasLtHandle_t*); cublasStatus_t cublasLtDestroy(cublasLtHandle_t);
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t*, int, int);
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t);
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t, int, const void*, size_t);
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t*, int, uint64_t, uint64_t, int64_t);
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t);
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t*);
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t);
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t, int, const void*, size_t);
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t,
                                              cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                              cublasLtMatmulPreference_t, int, cublasLtMatmulHeuristicResult_t*, int*);
cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t, const void*, const void*, cublasLtMatrixLayout_t,
                              const void*, cublasLtMatrixLayout_t, const void*, const void*, cublasLtMatrixLayout_t,
                              void*, cublasLtMatrixLayout_t, const cublasLtMatmulAlgo_t*, void*, size_t, cudaStream_t);
const char* cublasGetStatusString(cublasStatus_t);
namespace at { namespace cuda { cublasHandle_t getCurrentCUDABlasHandle(); cublasLtHandle_t getCurrentCUDABlasLtHandle(); } }
