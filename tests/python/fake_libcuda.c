// A stand-in for libcuda.so.1, for testing gpt_runtime on a machine without a GPU: the driver calls
// the runtime makes, over host memory, with the real driver's rules where a runtime bug would break
// them (a current context for every call, capture only on a created stream, pointers inside live
// allocations, parameters copied at launch or capture). Its kernels are toy_kernels.ptx's two,
// run on the CPU by name. Environment variables play other machines:
//   FAKE_CUDA_INIT_ERROR=100   cuInit returns this CUresult (100: CUDA_ERROR_NO_DEVICE)
//   FAKE_CUDA_DEVICES=0        the device count (default 1)
//   FAKE_CUDA_DRIVER=11080     cuDriverGetVersion (default 12080)
//   FAKE_CUDA_CC=80            the compute capability, major and minor digits (default 90)
//   FAKE_CUDA_MEMORY=4096      bytes the device has (default unlimited): then out of memory
//   FAKE_CUDA_NOOP_KERNELS=1   any other .entry of the PTX runs as a no-op that only checks that its
//                              pointer-like arguments point into live allocations (for an artifact
//                              the compiler exported: its buffers, bindings and graphs, not its math)
// fake_cuda_stats() reports what is alive and what ran, for tests that check nothing leaks.
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

enum {
  SUCCESS = 0,
  INVALID_VALUE = 1,
  OUT_OF_MEMORY = 2,
  NOT_INITIALIZED = 3,
  NO_DEVICE = 100,
  INVALID_DEVICE = 101,
  INVALID_CONTEXT = 201,
  INVALID_PTX = 218,
  INVALID_HANDLE = 400,
  NOT_FOUND = 500,
  ILLEGAL_ADDRESS = 700,
  CAPTURE_UNSUPPORTED = 900,
  CAPTURE_INVALIDATED = 901,
};

static const struct {
  int code;
  const char *name, *text;
} kErrors[] = {
    {SUCCESS, "CUDA_SUCCESS", "no error"},
    {INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {INVALID_PTX, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
    {INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {CAPTURE_UNSUPPORTED, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", "operation not permitted when stream is capturing"},
    {CAPTURE_INVALIDATED, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
     "operation failed due to a previous error during capture"},
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int initialized;
static int context_references;
static int the_context; // its address is the one context's handle
static __thread void *current;

static long env_long(const char *name, long fallback) {
  const char *value = getenv(name);
  return value && *value ? strtol(value, NULL, 10) : fallback;
}

// -- allocations ------------------------------------------------------------------------------

#define MAX_ALLOCATIONS 4096
static struct {
  char *base;
  size_t size;
} allocations[MAX_ALLOCATIONS];
static long long live_bytes, live_allocations, launches_run, graphs_made, graph_launches, live_graphs, live_modules;

static int find_allocation(CUdeviceptr p) {
  for (int i = 0; i < MAX_ALLOCATIONS; ++i)
    if (allocations[i].base && (char *)p >= allocations[i].base &&
        (char *)p < allocations[i].base + allocations[i].size)
      return i;
  return -1;
}

// [p, p + size) inside one live allocation.
static int valid_range(CUdeviceptr p, size_t size) {
  int i = find_allocation(p);
  return i >= 0 && (char *)p + size <= allocations[i].base + allocations[i].size;
}

#define NEED_CONTEXT()                                                                                                 \
  do {                                                                                                                 \
    if (!initialized) return NOT_INITIALIZED;                                                                          \
    if (!current) return INVALID_CONTEXT;                                                                              \
  } while (0)

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t size) {
  NEED_CONTEXT();
  if (!p || size == 0) return INVALID_VALUE;
  long memory = env_long("FAKE_CUDA_MEMORY", -1);
  if (memory >= 0 && live_bytes + (long long)size > memory) return OUT_OF_MEMORY;
  for (int i = 0; i < MAX_ALLOCATIONS; ++i) {
    if (allocations[i].base) continue;
    char *base = malloc(size);
    if (!base) return OUT_OF_MEMORY;
    memset(base, 0xff, size); // like fresh device memory, not zeros: NaN as float
    allocations[i].base = base;
    allocations[i].size = size;
    live_bytes += size;
    ++live_allocations;
    *p = (CUdeviceptr)base;
    return SUCCESS;
  }
  return OUT_OF_MEMORY;
}

CUresult cuMemFree_v2(CUdeviceptr p) {
  NEED_CONTEXT();
  int i = find_allocation(p);
  if (i < 0 || (char *)p != allocations[i].base) return INVALID_VALUE;
  free(allocations[i].base);
  live_bytes -= allocations[i].size;
  --live_allocations;
  allocations[i].base = NULL;
  return SUCCESS;
}

// -- streams and graphs -------------------------------------------------------------------------

enum { MAX_PARAMS = 16 };
typedef struct {
  int kind, count; // see Function
  uint64_t params[MAX_PARAMS];
} Launch;

typedef struct {
  Launch *launches;
  int count;
} Graph;

typedef struct {
  int capturing;
  Graph *graph;
} Stream;

typedef struct {
  int kind;   // 0 a no-op, 1 toy_store, 2 toy_logits
  int params; // how many 8-byte parameters
} Function;

static Function kStore = {1, 5}, kLogits = {2, 9};

static int graph_append(Graph *graph, const Launch *launch) {
  Launch *grown = realloc(graph->launches, sizeof(Launch) * (graph->count + 1));
  if (!grown) return OUT_OF_MEMORY;
  graph->launches = grown;
  graph->launches[graph->count++] = *launch;
  return SUCCESS;
}

CUresult cuStreamCreate(void **stream, unsigned flags) {
  NEED_CONTEXT();
  (void)flags;
  *stream = calloc(1, sizeof(Stream));
  return SUCCESS;
}

CUresult cuStreamDestroy_v2(void *stream) {
  NEED_CONTEXT();
  if (!stream) return INVALID_HANDLE;
  free(stream);
  return SUCCESS;
}

CUresult cuStreamSynchronize(void *stream) {
  NEED_CONTEXT();
  if (stream && ((Stream *)stream)->capturing) return CAPTURE_UNSUPPORTED;
  return SUCCESS;
}

CUresult cuStreamBeginCapture_v2(void *stream, int mode) {
  NEED_CONTEXT();
  if (!stream) return CAPTURE_UNSUPPORTED; // the legacy stream cannot capture
  if (mode < 0 || mode > 2) return INVALID_VALUE;
  Stream *s = stream;
  if (s->capturing) return INVALID_VALUE;
  s->capturing = 1;
  s->graph = calloc(1, sizeof(Graph));
  return SUCCESS;
}

CUresult cuStreamEndCapture(void *stream, void **graph) {
  NEED_CONTEXT();
  Stream *s = stream;
  if (!s || !s->capturing) return INVALID_VALUE;
  s->capturing = 0;
  *graph = s->graph;
  s->graph = NULL;
  return SUCCESS;
}

CUresult cuGraphDestroy(void *graph) {
  if (!graph) return INVALID_VALUE;
  free(((Graph *)graph)->launches);
  free(graph);
  return SUCCESS;
}

CUresult cuGraphInstantiateWithFlags(void **exec, void *graph, unsigned long long flags) {
  NEED_CONTEXT();
  (void)flags;
  Graph *from = graph, *copy = calloc(1, sizeof(Graph));
  for (int i = 0; i < from->count; ++i) graph_append(copy, &from->launches[i]);
  *exec = copy;
  ++graphs_made;
  ++live_graphs;
  return SUCCESS;
}

CUresult cuGraphExecDestroy(void *exec) {
  --live_graphs;
  return cuGraphDestroy(exec);
}

// -- the toy kernels ----------------------------------------------------------------------------

static int run_store(const uint64_t *a) {
  int64_t rows = (int64_t)a[3], cache_len = (int64_t)a[4];
  if (!valid_range(a[1], 8)) return ILLEGAL_ADDRESS;
  int64_t offset = *(int64_t *)a[1];
  for (int64_t r = 0; r < rows && offset + r < cache_len; ++r) {
    if (!valid_range(a[0] + 8 * r, 8) || !valid_range(a[2] + 4 * (offset + r), 4)) return ILLEGAL_ADDRESS;
    ((float *)a[2])[offset + r] = (float)(((int64_t *)a[0])[r] + 1);
  }
  return SUCCESS;
}

static int run_logits(const uint64_t *a) {
  int64_t rows = (int64_t)a[6], stride = (int64_t)a[7], vocab = (int64_t)a[8];
  if (!valid_range(a[3], 4) || !valid_range(a[4], 2)) return ILLEGAL_ADDRESS;
  uint32_t bits = (uint32_t)(*(uint16_t *)a[4]) << 16;
  float shift16;
  memcpy(&shift16, &bits, 4);
  float base = *(float *)a[3] + shift16;
  for (int64_t o = 0; o < rows; ++o) {
    if (a[1] && !valid_range(a[1], 8)) return ILLEGAL_ADDRESS;
    int64_t r = a[1] ? *(int64_t *)a[1] : o;
    if (!valid_range(a[0] + 8 * r, 8)) return ILLEGAL_ADDRESS;
    int64_t p = ((int64_t *)a[0])[r];
    float sum = base;
    for (int64_t j = 0; j <= p; ++j) {
      if (!valid_range(a[2] + 4 * j, 4)) return ILLEGAL_ADDRESS;
      sum += ((float *)a[2])[j];
    }
    int64_t t = (int64_t)sum % vocab;
    if (!valid_range(a[5] + 4 * (o * stride), 4 * stride)) return ILLEGAL_ADDRESS;
    for (int64_t c = 0; c < stride; ++c) ((float *)a[5])[o * stride + c] = c >= vocab ? 100.0f : c == t ? 1.0f : 0.0f;
  }
  return SUCCESS;
}

// A no-op kernel's arguments: what is too large to be an i64 size or index must be a live address
// (a graph replayed after its cache was freed is caught here).
static int run_noop(const Launch *launch) {
  for (int i = 0; i < launch->count; ++i)
    if (launch->params[i] >= (1ull << 32) && !valid_range(launch->params[i], 1)) return ILLEGAL_ADDRESS;
  return SUCCESS;
}

static int run(const Launch *launch) {
  ++launches_run;
  if (launch->kind == 0) return run_noop(launch);
  return launch->kind == 1 ? run_store(launch->params) : run_logits(launch->params);
}

CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, void *stream, void **params, void **extra) {
  NEED_CONTEXT();
  (void)shared;
  (void)extra;
  if (!f || !params || !gx || !gy || !gz || !bx || !by || !bz || (unsigned long)bx * by * bz > 1024)
    return INVALID_VALUE;
  const Function *function = f;
  Launch launch = {function->kind, function->params, {0}};
  for (int i = 0; i < launch.count; ++i) memcpy(&launch.params[i], params[i], 8); // copied now, as the driver does
  Stream *s = stream;
  if (s && s->capturing) return graph_append(s->graph, &launch);
  return run(&launch);
}

CUresult cuGraphLaunch(void *exec, void *stream) {
  NEED_CONTEXT();
  if (stream && ((Stream *)stream)->capturing) return CAPTURE_UNSUPPORTED;
  Graph *graph = exec;
  ++graph_launches;
  for (int i = 0; i < graph->count; ++i) {
    int status = run(&graph->launches[i]);
    if (status) return status;
  }
  return SUCCESS;
}

// -- copies ---------------------------------------------------------------------------------------

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t size, void *stream) {
  NEED_CONTEXT();
  if (stream && ((Stream *)stream)->capturing) return CAPTURE_UNSUPPORTED; // pageable memory
  if (!valid_range(dst, size)) return INVALID_VALUE;
  memcpy((void *)dst, src, size);
  return SUCCESS;
}

CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t size, void *stream) {
  NEED_CONTEXT();
  if (stream && ((Stream *)stream)->capturing) return CAPTURE_UNSUPPORTED;
  if (!valid_range(src, size)) return INVALID_VALUE;
  memcpy(dst, (void *)src, size);
  return SUCCESS;
}

CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t size, void *stream) {
  NEED_CONTEXT();
  if (stream && ((Stream *)stream)->capturing) return CAPTURE_UNSUPPORTED;
  if (!valid_range(dst, size)) return INVALID_VALUE;
  memset((void *)dst, value, size);
  return SUCCESS;
}

// -- modules ----------------------------------------------------------------------------------------

CUresult cuModuleLoadDataEx(void **module, const void *image, unsigned count, int *options, void **values) {
  NEED_CONTEXT();
  const char *ptx = image;
  if (strstr(ptx, "FAKE_PTXAS_ERROR")) {
    for (unsigned i = 0; i < count; ++i)
      if (options[i] == 5) // CU_JIT_ERROR_LOG_BUFFER, its size in the value of option 6
        for (unsigned j = 0; j < count; ++j)
          if (options[j] == 6)
            snprintf(values[i], (size_t)values[j], "ptxas fatal   : Unresolved extern function 'FAKE_PTXAS_ERROR'");
    return INVALID_PTX;
  }
  if (!strstr(ptx, ".version")) return INVALID_PTX;
  *module = strdup(ptx);
  ++live_modules;
  return SUCCESS;
}

CUresult cuModuleUnload(void *module) {
  NEED_CONTEXT();
  free(module);
  --live_modules;
  return SUCCESS;
}

CUresult cuModuleGetFunction(void **function, void *module, const char *name) {
  NEED_CONTEXT();
  char entry[256];
  snprintf(entry, sizeof entry, ".entry %s(", name);
  const char *found = strstr(module, entry);
  if (!found) return NOT_FOUND;
  if (!strcmp(name, "toy_store"))
    *function = &kStore;
  else if (!strcmp(name, "toy_logits"))
    *function = &kLogits;
  else if (env_long("FAKE_CUDA_NOOP_KERNELS", 0)) {
    Function *noop = calloc(1, sizeof(Function)); // one per lookup, never freed: a test's few kernels
    const char *end = strchr(found, ')');
    for (const char *p = strstr(found, ".param"); p && p < end && noop->params < MAX_PARAMS;
         p = strstr(p + 1, ".param"))
      ++noop->params;
    *function = noop;
  } else
    return NOT_FOUND; // in the PTX, but the fake cannot run it
  return SUCCESS;
}

CUresult cuFuncSetAttribute(void *function, int attribute, int value) {
  NEED_CONTEXT();
  return function && attribute == 8 && value >= 0 ? SUCCESS : INVALID_VALUE;
}

// -- devices and contexts ---------------------------------------------------------------------------

CUresult cuInit(unsigned flags) {
  long error = env_long("FAKE_CUDA_INIT_ERROR", 0);
  if (flags) return INVALID_VALUE;
  if (error) return (CUresult)error;
  initialized = 1;
  return SUCCESS;
}

CUresult cuDriverGetVersion(int *version) {
  *version = (int)env_long("FAKE_CUDA_DRIVER", 12080);
  return SUCCESS;
}

CUresult cuDeviceGetCount(int *count) {
  if (!initialized) return NOT_INITIALIZED;
  *count = (int)env_long("FAKE_CUDA_DEVICES", 1);
  return SUCCESS;
}

CUresult cuDeviceGet(int *device, int ordinal) {
  if (!initialized) return NOT_INITIALIZED;
  if (ordinal < 0 || ordinal >= env_long("FAKE_CUDA_DEVICES", 1)) return INVALID_DEVICE;
  *device = ordinal;
  return SUCCESS;
}

CUresult cuDeviceGetAttribute(int *value, int attribute, int device) {
  (void)device;
  if (!initialized) return NOT_INITIALIZED;
  long cc = env_long("FAKE_CUDA_CC", 90);
  if (attribute == 75)
    *value = (int)(cc / 10);
  else if (attribute == 76)
    *value = (int)(cc % 10);
  else
    return INVALID_VALUE;
  return SUCCESS;
}

CUresult cuDeviceGetName(char *name, int length, int device) {
  if (!initialized) return NOT_INITIALIZED;
  snprintf(name, (size_t)length, "Fake GPU %d (gpt_runtime tests)", device);
  return SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(void **context, int device) {
  (void)device;
  if (!initialized) return NOT_INITIALIZED;
  pthread_mutex_lock(&lock);
  ++context_references;
  pthread_mutex_unlock(&lock);
  *context = &the_context;
  return SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(int device) {
  (void)device;
  if (!initialized) return NOT_INITIALIZED;
  pthread_mutex_lock(&lock);
  int ok = context_references > 0;
  if (ok) --context_references;
  pthread_mutex_unlock(&lock);
  return ok ? SUCCESS : INVALID_CONTEXT;
}

CUresult cuCtxSetCurrent(void *context) {
  if (!initialized) return NOT_INITIALIZED;
  if (context && context != &the_context) return INVALID_CONTEXT;
  current = context;
  return SUCCESS;
}

// -- errors -----------------------------------------------------------------------------------------

CUresult cuGetErrorName(CUresult error, const char **name) {
  for (size_t i = 0; i < sizeof kErrors / sizeof kErrors[0]; ++i)
    if (kErrors[i].code == error) {
      *name = kErrors[i].name;
      return SUCCESS;
    }
  *name = NULL;
  return INVALID_VALUE;
}

CUresult cuGetErrorString(CUresult error, const char **text) {
  for (size_t i = 0; i < sizeof kErrors / sizeof kErrors[0]; ++i)
    if (kErrors[i].code == error) {
      *text = kErrors[i].text;
      return SUCCESS;
    }
  *text = NULL;
  return INVALID_VALUE;
}

// What is alive and what ran: allocations, their bytes, live graph executables, live modules,
// primary-context references; kernels run, graphs instantiated, graph launches.
void fake_cuda_stats(long long out[8]) {
  long long values[8] = {live_allocations,   live_bytes,   live_graphs, live_modules,
                         context_references, launches_run, graphs_made, graph_launches};
  memcpy(out, values, sizeof values);
}
