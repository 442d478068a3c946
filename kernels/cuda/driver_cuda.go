//go:build cuda && linux && (amd64 || arm64)

package cuda

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"unsafe"

	"github.com/ebitengine/purego"
)

// The CUDA driver API's constants this driver uses (cuda.h).
const (
	cuDevAttrComputeMajor = 75 // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
	cuDevAttrComputeMinor = 76 // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR
	cuStreamNonBlocking   = 1  // CU_STREAM_NON_BLOCKING
	cuCaptureThreadLocal  = 1  // CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
	cuEventDisableTiming  = 2  // CU_EVENT_DISABLE_TIMING
	cuJitErrorLogBuffer   = 5  // CU_JIT_ERROR_LOG_BUFFER
	cuJitErrorLogSize     = 6  // CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES
	cuErrorNoDevice       = 100

	// cuBLASLt's (cublasLt.h, cublas_api.h).
	cublasCompute32F      = 68 // CUBLAS_COMPUTE_32F: fp32 accumulation, no TF32
	ltMatmulDescTransA    = 3  // CUBLASLT_MATMUL_DESC_TRANSA
	ltMatmulDescTransB    = 4  // CUBLASLT_MATMUL_DESC_TRANSB
	ltPrefMaxWorkspace    = 1  // CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES
	gemmWorkspaceBytes    = 32 << 20
	stagingSlots          = 8
	stagingSlotBytes      = 4 << 20
	jitErrorLogBytes      = 16 << 10
	cstringMax            = 4096
	dlopenFlags           = purego.RTLD_NOW | purego.RTLD_GLOBAL
	libcudaMissingMessage = "libcuda.so.1 not found (is the NVIDIA driver installed?)"
)

// cuFuncs are libcuda's entry points. Each is looked up by its versioned
// name first (cuda.h maps cuMemAlloc to cuMemAlloc_v2 and so on; the bare
// name is the old ABI).
type cuFuncs struct {
	getErrorName, getErrorString                                          uintptr
	init, deviceGetCount, deviceGet, deviceGetName, deviceGetAttribute    uintptr
	deviceTotalMem, primaryCtxRetain, primaryCtxRelease, ctxSetCurrent    uintptr
	streamCreate, streamDestroy, streamSynchronize                        uintptr
	moduleLoadDataEx, moduleUnload, moduleGetFunction, launchKernel       uintptr
	memAlloc, memFree, memsetD8Async, memcpyHtoDAsync, memcpyDtoHAsync    uintptr
	memGetInfo, memHostAlloc, memFreeHost                                 uintptr
	eventCreate, eventRecord, eventSynchronize, eventDestroy              uintptr
	streamBeginCapture, streamEndCapture, graphInstantiate, graphLaunch   uintptr
	graphExecDestroy, graphDestroy                                        uintptr
	ltCreate, ltDestroy, ltMatmulDescCreate, ltMatmulDescDestroy          uintptr
	ltMatmulDescSetAttribute, ltMatrixLayoutCreate, ltMatrixLayoutDestroy uintptr
	ltPreferenceCreate, ltPreferenceDestroy, ltPreferenceSetAttribute     uintptr
	ltAlgoGetHeuristic, ltMatmul                                          uintptr
	ltStatusName, ltStatusString                                          func(int32) string
}

// symbol looks up the first of names that lib exports.
func symbol(lib uintptr, libName string, names ...string) (uintptr, error) {
	for _, n := range names {
		if p, err := purego.Dlsym(lib, n); err == nil && p != 0 {
			return p, nil
		}
	}
	return 0, fmt.Errorf("%s has no %s (too old a version?)", libName, strings.Join(names, " or "))
}

func (f *cuFuncs) loadCUDA(lib uintptr) error {
	for _, s := range []struct {
		p     *uintptr
		names []string
	}{
		{&f.getErrorName, []string{"cuGetErrorName"}},
		{&f.getErrorString, []string{"cuGetErrorString"}},
		{&f.init, []string{"cuInit"}},
		{&f.deviceGetCount, []string{"cuDeviceGetCount"}},
		{&f.deviceGet, []string{"cuDeviceGet"}},
		{&f.deviceGetName, []string{"cuDeviceGetName"}},
		{&f.deviceGetAttribute, []string{"cuDeviceGetAttribute"}},
		{&f.deviceTotalMem, []string{"cuDeviceTotalMem_v2"}},
		{&f.primaryCtxRetain, []string{"cuDevicePrimaryCtxRetain"}},
		{&f.primaryCtxRelease, []string{"cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"}},
		{&f.ctxSetCurrent, []string{"cuCtxSetCurrent"}},
		{&f.streamCreate, []string{"cuStreamCreate"}},
		{&f.streamDestroy, []string{"cuStreamDestroy_v2"}},
		{&f.streamSynchronize, []string{"cuStreamSynchronize"}},
		{&f.moduleLoadDataEx, []string{"cuModuleLoadDataEx"}},
		{&f.moduleUnload, []string{"cuModuleUnload"}},
		{&f.moduleGetFunction, []string{"cuModuleGetFunction"}},
		{&f.launchKernel, []string{"cuLaunchKernel"}},
		{&f.memAlloc, []string{"cuMemAlloc_v2"}},
		{&f.memFree, []string{"cuMemFree_v2"}},
		{&f.memsetD8Async, []string{"cuMemsetD8Async"}},
		{&f.memcpyHtoDAsync, []string{"cuMemcpyHtoDAsync_v2"}},
		{&f.memcpyDtoHAsync, []string{"cuMemcpyDtoHAsync_v2"}},
		{&f.memGetInfo, []string{"cuMemGetInfo_v2"}},
		{&f.memHostAlloc, []string{"cuMemHostAlloc"}},
		{&f.memFreeHost, []string{"cuMemFreeHost"}},
		{&f.eventCreate, []string{"cuEventCreate"}},
		{&f.eventRecord, []string{"cuEventRecord"}},
		{&f.eventSynchronize, []string{"cuEventSynchronize"}},
		{&f.eventDestroy, []string{"cuEventDestroy_v2"}},
		// The bare cuStreamBeginCapture is CUDA 10.0's, without a mode.
		{&f.streamBeginCapture, []string{"cuStreamBeginCapture_v2"}},
		{&f.streamEndCapture, []string{"cuStreamEndCapture"}},
		{&f.graphInstantiate, []string{"cuGraphInstantiateWithFlags"}},
		{&f.graphLaunch, []string{"cuGraphLaunch"}},
		{&f.graphExecDestroy, []string{"cuGraphExecDestroy"}},
		{&f.graphDestroy, []string{"cuGraphDestroy"}},
	} {
		p, err := symbol(lib, "libcuda", s.names...)
		if err != nil {
			return err
		}
		*s.p = p
	}
	return nil
}

func (f *cuFuncs) loadCublasLt(lib uintptr) error {
	for _, s := range []struct {
		p    *uintptr
		name string
	}{
		{&f.ltCreate, "cublasLtCreate"},
		{&f.ltDestroy, "cublasLtDestroy"},
		{&f.ltMatmulDescCreate, "cublasLtMatmulDescCreate"},
		{&f.ltMatmulDescDestroy, "cublasLtMatmulDescDestroy"},
		{&f.ltMatmulDescSetAttribute, "cublasLtMatmulDescSetAttribute"},
		{&f.ltMatrixLayoutCreate, "cublasLtMatrixLayoutCreate"},
		{&f.ltMatrixLayoutDestroy, "cublasLtMatrixLayoutDestroy"},
		{&f.ltPreferenceCreate, "cublasLtMatmulPreferenceCreate"},
		{&f.ltPreferenceDestroy, "cublasLtMatmulPreferenceDestroy"},
		{&f.ltPreferenceSetAttribute, "cublasLtMatmulPreferenceSetAttribute"},
		{&f.ltAlgoGetHeuristic, "cublasLtMatmulAlgoGetHeuristic"},
		{&f.ltMatmul, "cublasLtMatmul"},
	} {
		p, err := symbol(lib, "libcublasLt", s.name)
		if err != nil {
			return err
		}
		*s.p = p
	}
	// The status names are a convenience: older releases lack them.
	if p, err := purego.Dlsym(lib, "cublasLtGetStatusName"); err == nil && p != 0 {
		purego.RegisterFunc(&f.ltStatusName, p)
	}
	if p, err := purego.Dlsym(lib, "cublasLtGetStatusString"); err == nil && p != 0 {
		purego.RegisterFunc(&f.ltStatusString, p)
	}
	return nil
}

// CUDAError is a failed CUDA driver or cuBLASLt call.
type CUDAError struct {
	Func string // the C function, "cuMemAlloc"
	Code int    // its CUresult or cublasStatus_t
	Name string // "CUDA_ERROR_OUT_OF_MEMORY"
	Text string // the library's description
}

func (e *CUDAError) Error() string {
	return fmt.Sprintf("%s: %s (%d): %s", e.Func, e.Name, e.Code, e.Text)
}

// cu calls a libcuda function and turns a CUresult other than
// CUDA_SUCCESS into a *CUDAError. Pointer arguments must be converted in
// the call expression (uintptr(unsafe.Pointer(&x))): go:uintptrescapes
// then keeps what they point at on the heap and alive for the call.
//
//go:uintptrescapes
func (f *cuFuncs) cu(name string, fn uintptr, args ...uintptr) error {
	r, _, _ := purego.SyscallN(fn, args...)
	if res := int32(r); res != 0 {
		return f.cuError(name, res)
	}
	return nil
}

func (f *cuFuncs) cuError(name string, res int32) *CUDAError {
	e := &CUDAError{Func: name, Code: int(res), Name: "CUDA_ERROR_UNKNOWN", Text: "unrecognized error code"}
	var s *byte
	if r, _, _ := purego.SyscallN(f.getErrorName, uintptr(res), uintptr(unsafe.Pointer(&s))); r == 0 && s != nil {
		e.Name = goString(s)
	}
	s = nil
	if r, _, _ := purego.SyscallN(f.getErrorString, uintptr(res), uintptr(unsafe.Pointer(&s))); r == 0 && s != nil {
		e.Text = goString(s)
	}
	return e
}

// lt calls a cuBLASLt function, as cu does.
//
//go:uintptrescapes
func (f *cuFuncs) lt(name string, fn uintptr, args ...uintptr) error {
	r, _, _ := purego.SyscallN(fn, args...)
	if st := int32(r); st != 0 {
		e := &CUDAError{Func: name, Code: int(st), Name: "CUBLAS_STATUS_?", Text: "no status text in this cuBLASLt"}
		if f.ltStatusName != nil {
			e.Name = f.ltStatusName(st)
		}
		if f.ltStatusString != nil {
			e.Text = f.ltStatusString(st)
		}
		return e
	}
	return nil
}

// goString copies the NUL-terminated C string at p.
func goString(p *byte) string {
	var b []byte
	for i := 0; i < cstringMax; i++ {
		c := *(*byte)(unsafe.Add(unsafe.Pointer(p), i))
		if c == 0 {
			break
		}
		b = append(b, c)
	}
	return string(b)
}

// openLibrary dlopens the first candidate that loads and says where it
// came from; the error lists every candidate's failure.
func openLibrary(candidates []string, stem string) (handle uintptr, path string, err error) {
	var errs []string
	for _, c := range candidates {
		h, err := purego.Dlopen(c, dlopenFlags)
		if err == nil {
			if !strings.Contains(c, "/") {
				if p := loadedPath(stem); p != "" {
					c = p
				}
			}
			return h, c, nil
		}
		errs = append(errs, err.Error())
	}
	return 0, "", fmt.Errorf("tried %s: %s", strings.Join(candidates, ", "), strings.Join(errs, "; "))
}

// findCUDA loads libcuda: the driver's own (the dynamic loader's path)
// first, since it must match the kernel module, then $BATCHD_CUDA_LIBS.
func findCUDA() (uintptr, string, error) {
	h, p, err := openLibrary(libCandidates(cudaLibNames, nil, envLibDirs(os.Getenv)), "libcuda.so")
	if err != nil {
		return 0, "", fmt.Errorf("%w: %s: %v", ErrNoDevice, libcudaMissingMessage, err)
	}
	return h, p, nil
}

// findCublasLt loads libcublasLt: $BATCHD_CUDA_LIBS first (an explicit
// choice wins), then the loader's path, then a CUDA toolkit's and a pip
// PyTorch's directories.
func findCublasLt() (uintptr, string, error) {
	cands := libCandidates(cublasLtLibNames, envLibDirs(os.Getenv), wellKnownLibDirs(os.Getenv))
	h, p, err := openLibrary(cands, "libcublasLt.so")
	if err != nil {
		return 0, "", fmt.Errorf("%w: libcublasLt not found (install the CUDA toolkit's libcublas, or set %s to the directory holding libcublasLt.so.12): %v", ErrNoDevice, LibsEnv, err)
	}
	return h, p, nil
}

// gemmKey is what a cached cuBLASLt plan depends on.
type gemmKey struct {
	m, n, k int
	t       ElemType
}

// ltHeuristic is cublasLtMatmulHeuristicResult_t.
type ltHeuristic struct {
	algo          [8]uint64 // cublasLtMatmulAlgo_t
	workspaceSize uint64
	state         int32
	wavesCount    float32
	reserved      [4]int32
}

// gemmEntry is one shape's layouts and chosen algorithm.
type gemmEntry struct {
	a, b, c uintptr // cublasLtMatrixLayout_t
	heur    ltHeuristic
}

// stagingSlot is a pinned host buffer CopyIn copies through, and the event
// that marks when the copy reading it is done.
type stagingSlot struct {
	host  unsafe.Pointer
	event uintptr
	busy  bool
}

// gpuDriver is the Driver on a real GPU. Every field below thread is
// touched only on thread.
type gpuDriver struct {
	thread *osThread
	log    *slog.Logger
	f      cuFuncs
	paths  Libraries

	name string
	arch int

	dev    int32
	ctx    uintptr
	stream uintptr
	module uintptr
	funcs  map[string]uintptr

	params *launchParams // pinned for the driver's life
	pinner runtime.Pinner

	lt        uintptr // cublasLtHandle_t
	ltDesc    uintptr // cublasLtMatmulDesc_t: compute 32F, scale 32F, TN
	ltPref    uintptr // cublasLtMatmulPreference_t
	workspace DevPtr
	scalars   *[2]float32 // alpha 1, beta 0, pinned
	gemms     map[gemmKey]*gemmEntry

	slots [stagingSlots]stagingSlot
	next  int

	cleanup []func() // undone in reverse by Close
}

var _ Driver = (*gpuDriver)(nil)

// OpenDriver loads libcuda and libcublasLt, opens GPU ordinal (its primary
// context, one non-blocking stream, a cuBLASLt handle) and loads the kernel
// module from ptx(arch), arch being the compute capability as 90 for
// sm_90; ptx may be nil for a Driver that only copies and multiplies
// (Launch then fails). No driver library, no device or an ordinal past the
// last device give an error wrapping ErrNoDevice.
func OpenDriver(ordinal int, ptx func(arch int) ([]byte, error)) (Driver, error) {
	d := &gpuDriver{
		thread: newOSThread(),
		log:    slog.Default().With("component", "cuda"),
		funcs:  map[string]uintptr{},
		gemms:  map[gemmKey]*gemmEntry{},
		params: new(launchParams),
	}
	err := d.thread.do(func() error { return d.open(ordinal, ptx) })
	rememberLibraries(d.paths)
	if err != nil {
		d.Close()
		return nil, err
	}
	d.log.Info("cuda device opened", "device", d.name, "ordinal", ordinal,
		"libcuda", d.paths.CUDA, "libcublasLt", d.paths.CublasLt)
	return d, nil
}

// open runs on d.thread.
func (d *gpuDriver) open(ordinal int, ptx func(arch int) ([]byte, error)) error {
	cudaLib, cudaPath, err := findCUDA()
	if err != nil {
		return err
	}
	d.paths.CUDA = cudaPath
	if err := d.f.loadCUDA(cudaLib); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrNoDevice, cudaPath, err)
	}
	f := &d.f
	if err := f.cu("cuInit", f.init, 0); err != nil {
		return fmt.Errorf("%w: %v", ErrNoDevice, err)
	}
	var count int32
	if err := f.cu("cuDeviceGetCount", f.deviceGetCount, uintptr(unsafe.Pointer(&count))); err != nil {
		return fmt.Errorf("%w: %v", ErrNoDevice, err)
	}
	if count == 0 {
		return fmt.Errorf("%w: the NVIDIA driver sees no GPU", ErrNoDevice)
	}
	if ordinal < 0 || ordinal >= int(count) {
		return fmt.Errorf("%w: GPU %d asked for, but there are %d (0..%d)", ErrNoDevice, ordinal, count, count-1)
	}
	if err := f.cu("cuDeviceGet", f.deviceGet, uintptr(unsafe.Pointer(&d.dev)), uintptr(ordinal)); err != nil {
		return err
	}
	var nameBuf [256]byte
	if err := f.cu("cuDeviceGetName", f.deviceGetName, uintptr(unsafe.Pointer(&nameBuf[0])), uintptr(len(nameBuf)), uintptr(d.dev)); err != nil {
		return err
	}
	var major, minor int32
	if err := f.cu("cuDeviceGetAttribute", f.deviceGetAttribute, uintptr(unsafe.Pointer(&major)), cuDevAttrComputeMajor, uintptr(d.dev)); err != nil {
		return err
	}
	if err := f.cu("cuDeviceGetAttribute", f.deviceGetAttribute, uintptr(unsafe.Pointer(&minor)), cuDevAttrComputeMinor, uintptr(d.dev)); err != nil {
		return err
	}
	var total uint64
	if err := f.cu("cuDeviceTotalMem", f.deviceTotalMem, uintptr(unsafe.Pointer(&total)), uintptr(d.dev)); err != nil {
		return err
	}
	d.arch = int(major)*10 + int(minor)
	d.name = fmt.Sprintf("%s (sm_%d, %.1f GiB)", goString(&nameBuf[0]), d.arch, float64(total)/(1<<30))

	// The primary context, which the CUDA runtime inside cuBLASLt uses
	// too, made current on this thread for good.
	if err := f.cu("cuDevicePrimaryCtxRetain", f.primaryCtxRetain, uintptr(unsafe.Pointer(&d.ctx)), uintptr(d.dev)); err != nil {
		return err
	}
	d.defer_(func() { d.warn(f.cu("cuDevicePrimaryCtxRelease", f.primaryCtxRelease, uintptr(d.dev))) })
	if err := f.cu("cuCtxSetCurrent", f.ctxSetCurrent, d.ctx); err != nil {
		return err
	}
	if err := f.cu("cuStreamCreate", f.streamCreate, uintptr(unsafe.Pointer(&d.stream)), cuStreamNonBlocking); err != nil {
		return err
	}
	d.defer_(func() { d.warn(f.cu("cuStreamDestroy", f.streamDestroy, d.stream)) })

	d.pinner.Pin(d.params)
	d.scalars = &[2]float32{1, 0}
	d.pinner.Pin(d.scalars)
	d.defer_(d.pinner.Unpin)

	if ptx != nil {
		if err := d.loadModule(ptx); err != nil {
			return err
		}
	}
	for i := range d.slots {
		s := &d.slots[i]
		if err := f.cu("cuMemHostAlloc", f.memHostAlloc, uintptr(unsafe.Pointer(&s.host)), stagingSlotBytes, 0); err != nil {
			return fmt.Errorf("pinned staging buffer: %w", err)
		}
		d.defer_(func() { d.warn(f.cu("cuMemFreeHost", f.memFreeHost, uintptr(s.host))) })
		if err := f.cu("cuEventCreate", f.eventCreate, uintptr(unsafe.Pointer(&s.event)), cuEventDisableTiming); err != nil {
			return err
		}
		d.defer_(func() { d.warn(f.cu("cuEventDestroy", f.eventDestroy, s.event)) })
	}

	ltLib, ltPath, err := findCublasLt()
	if err != nil {
		return err
	}
	d.paths.CublasLt = ltPath
	if err := f.loadCublasLt(ltLib); err != nil {
		return fmt.Errorf("%s: %w", ltPath, err)
	}
	return d.openCublasLt()
}

func (d *gpuDriver) loadModule(ptx func(arch int) ([]byte, error)) error {
	f := &d.f
	image, err := ptx(d.arch)
	if err != nil {
		return fmt.Errorf("kernel PTX for sm_%d: %w", d.arch, err)
	}
	if len(image) == 0 || image[len(image)-1] != 0 {
		image = append(image[:len(image):len(image)], 0) // the driver reads a C string
	}
	logBuf := make([]byte, jitErrorLogBytes)
	opts := [2]int32{cuJitErrorLogBuffer, cuJitErrorLogSize}
	// Option values are void*: the buffer's address, and its size as a
	// pointer-sized integer (which the driver overwrites with the length
	// it wrote).
	var pin runtime.Pinner
	pin.Pin(&logBuf[0])
	pin.Pin(&image[0])
	defer pin.Unpin()
	vals := &[2]uintptr{uintptr(unsafe.Pointer(&logBuf[0])), uintptr(len(logBuf))}
	err = f.cu("cuModuleLoadDataEx", f.moduleLoadDataEx, uintptr(unsafe.Pointer(&d.module)),
		uintptr(unsafe.Pointer(&image[0])), uintptr(len(opts)), uintptr(unsafe.Pointer(&opts[0])), uintptr(unsafe.Pointer(&vals[0])))
	runtime.KeepAlive(logBuf)
	if err != nil {
		if msg := strings.TrimSpace(goString(&logBuf[0])); msg != "" {
			return fmt.Errorf("load the kernels' PTX for sm_%d: %w\nJIT log:\n%s", d.arch, err, msg)
		}
		return fmt.Errorf("load the kernels' PTX for sm_%d: %w", d.arch, err)
	}
	d.defer_(func() { d.warn(f.cu("cuModuleUnload", f.moduleUnload, d.module)) })
	return nil
}

func (d *gpuDriver) openCublasLt() error {
	f := &d.f
	if err := f.lt("cublasLtCreate", f.ltCreate, uintptr(unsafe.Pointer(&d.lt))); err != nil {
		return err
	}
	d.defer_(func() { d.warn(f.lt("cublasLtDestroy", f.ltDestroy, d.lt)) })
	// One matmul descriptor serves every element type: it holds only the
	// compute and scale types (fp32, no TF32) and the transposes (TN,
	// see planGemm); the operand types live in the layouts.
	if err := f.lt("cublasLtMatmulDescCreate", f.ltMatmulDescCreate, uintptr(unsafe.Pointer(&d.ltDesc)), cublasCompute32F, uintptr(cudaR32F)); err != nil {
		return err
	}
	d.defer_(func() { d.warn(f.lt("cublasLtMatmulDescDestroy", f.ltMatmulDescDestroy, d.ltDesc)) })
	ops := &[2]int32{int32(opT), int32(opN)}
	if err := f.lt("cublasLtMatmulDescSetAttribute", f.ltMatmulDescSetAttribute, d.ltDesc, ltMatmulDescTransA, uintptr(unsafe.Pointer(&ops[0])), 4); err != nil {
		return err
	}
	if err := f.lt("cublasLtMatmulDescSetAttribute", f.ltMatmulDescSetAttribute, d.ltDesc, ltMatmulDescTransB, uintptr(unsafe.Pointer(&ops[1])), 4); err != nil {
		return err
	}
	if err := f.lt("cublasLtMatmulPreferenceCreate", f.ltPreferenceCreate, uintptr(unsafe.Pointer(&d.ltPref))); err != nil {
		return err
	}
	d.defer_(func() { d.warn(f.lt("cublasLtMatmulPreferenceDestroy", f.ltPreferenceDestroy, d.ltPref)) })
	ws := new(uint64)
	*ws = gemmWorkspaceBytes
	if err := f.lt("cublasLtMatmulPreferenceSetAttribute", f.ltPreferenceSetAttribute, d.ltPref, ltPrefMaxWorkspace, uintptr(unsafe.Pointer(ws)), 8); err != nil {
		return err
	}
	p, err := d.alloc(gemmWorkspaceBytes)
	if err != nil {
		return fmt.Errorf("cuBLASLt workspace: %w", err)
	}
	d.workspace = p
	d.defer_(func() { d.free(d.workspace) })
	d.defer_(d.dropGemms)
	return nil
}

// defer_ queues an undo step for Close.
func (d *gpuDriver) defer_(f func()) { d.cleanup = append(d.cleanup, f) }

func (d *gpuDriver) warn(err error) {
	if err != nil {
		d.log.Warn("cuda cleanup", "err", err)
	}
}

func (d *gpuDriver) Name() string { return d.name }
func (d *gpuDriver) Arch() int    { return d.arch }

func (d *gpuDriver) MemInfo() (free, total int64, err error) {
	err = d.thread.do(func() error {
		var fr, tot uint64
		if err := d.f.cu("cuMemGetInfo", d.f.memGetInfo, uintptr(unsafe.Pointer(&fr)), uintptr(unsafe.Pointer(&tot))); err != nil {
			return err
		}
		free, total = int64(fr), int64(tot)
		return nil
	})
	return free, total, err
}

func (d *gpuDriver) alloc(n int64) (DevPtr, error) {
	if n <= 0 {
		return 0, fmt.Errorf("allocate %d bytes: want a positive size", n)
	}
	var p DevPtr
	if err := d.f.cu("cuMemAlloc", d.f.memAlloc, uintptr(unsafe.Pointer(&p)), uintptr(n)); err != nil {
		return 0, fmt.Errorf("allocate %d bytes: %w", n, err)
	}
	return p, nil
}

func (d *gpuDriver) free(p DevPtr) {
	if p != 0 {
		d.warn(d.f.cu("cuMemFree", d.f.memFree, uintptr(p)))
	}
}

func (d *gpuDriver) Alloc(n int64) (p DevPtr, err error) {
	err = d.thread.do(func() error {
		p, err = d.alloc(n)
		return err
	})
	return p, err
}

func (d *gpuDriver) Free(p DevPtr) {
	_ = d.thread.do(func() error { d.free(p); return nil }) // a closed driver freed everything
}

func (d *gpuDriver) Memset(p DevPtr, n int64) error {
	if n <= 0 {
		return nil
	}
	return d.thread.do(func() error {
		return d.f.cu("cuMemsetD8Async", d.f.memsetD8Async, uintptr(p), 0, uintptr(n), d.stream)
	})
}

// CopyIn copies src through the pinned staging slots in turn, each at most
// stagingSlotBytes: a slot is refilled only after the event recorded behind
// its last copy, so src is free on return while the copies run in stream
// order.
func (d *gpuDriver) CopyIn(dst DevPtr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	return d.thread.do(func() error {
		f := &d.f
		for off := 0; off < len(src); {
			s := &d.slots[d.next]
			d.next = (d.next + 1) % len(d.slots)
			if s.busy {
				if err := f.cu("cuEventSynchronize", f.eventSynchronize, s.event); err != nil {
					return err
				}
				s.busy = false
			}
			n := min(stagingSlotBytes, len(src)-off)
			copy(unsafe.Slice((*byte)(s.host), n), src[off:off+n])
			if err := f.cu("cuMemcpyHtoDAsync", f.memcpyHtoDAsync, uintptr(dst)+uintptr(off), uintptr(s.host), uintptr(n), d.stream); err != nil {
				return err
			}
			if err := f.cu("cuEventRecord", f.eventRecord, s.event, d.stream); err != nil {
				return err
			}
			s.busy = true
			off += n
		}
		return nil
	})
}

// CopyOut copies straight into dst (pageable memory: the driver stages it)
// and waits for the stream, so dst is pinned only for the call.
func (d *gpuDriver) CopyOut(dst []byte, src DevPtr) error {
	if len(dst) == 0 {
		return nil
	}
	return d.thread.do(func() error {
		f := &d.f
		var pin runtime.Pinner
		pin.Pin(&dst[0])
		defer pin.Unpin()
		if err := f.cu("cuMemcpyDtoHAsync", f.memcpyDtoHAsync, uintptr(unsafe.Pointer(&dst[0])), uintptr(src), uintptr(len(dst)), d.stream); err != nil {
			return err
		}
		return f.cu("cuStreamSynchronize", f.streamSynchronize, d.stream)
	})
}

func (d *gpuDriver) function(name string) (uintptr, error) {
	if fn, ok := d.funcs[name]; ok {
		return fn, nil
	}
	if d.module == 0 {
		return 0, fmt.Errorf("kernel %s: this driver was opened without a kernel module", name)
	}
	cname := append([]byte(name), 0)
	var fn uintptr
	if err := d.f.cu("cuModuleGetFunction", d.f.moduleGetFunction, uintptr(unsafe.Pointer(&fn)), d.module, uintptr(unsafe.Pointer(&cname[0]))); err != nil {
		return 0, fmt.Errorf("kernel %s: %w", name, err)
	}
	d.funcs[name] = fn
	return fn, nil
}

func (d *gpuDriver) Launch(name string, grid, block Dim3, shared uint32, args ...Arg) error {
	if grid.X == 0 || grid.Y == 0 || grid.Z == 0 || block.X == 0 || block.Y == 0 || block.Z == 0 {
		return fmt.Errorf("launch %s: empty grid %v or block %v", name, grid, block)
	}
	return d.thread.do(func() error {
		fn, err := d.function(name)
		if err != nil {
			return err
		}
		params, err := d.params.pack(args)
		if err != nil {
			return fmt.Errorf("launch %s: %w", name, err)
		}
		// d.params is pinned; the driver copies the values during the call.
		err = d.f.cu("cuLaunchKernel", d.f.launchKernel, fn,
			uintptr(grid.X), uintptr(grid.Y), uintptr(grid.Z),
			uintptr(block.X), uintptr(block.Y), uintptr(block.Z),
			uintptr(shared), d.stream, uintptr(params), 0)
		if err != nil {
			return fmt.Errorf("launch %s: %w", name, err)
		}
		return nil
	})
}

// gemm returns g's cached plan: layouts and the heuristic's first
// algorithm, found once per (M, N, K, type).
func (d *gpuDriver) gemm(g Gemm) (*gemmEntry, error) {
	key := gemmKey{g.M, g.N, g.K, g.Type}
	if e, ok := d.gemms[key]; ok {
		return e, nil
	}
	plan, err := planGemm(g)
	if err != nil {
		return nil, err
	}
	f := &d.f
	e := &gemmEntry{}
	fail := func(err error) (*gemmEntry, error) {
		d.dropGemm(e)
		return nil, fmt.Errorf("gemm %d×%d×%d %s: %w", g.M, g.N, g.K, g.Type, err)
	}
	for _, l := range []struct {
		p *uintptr
		l ltLayout
	}{{&e.a, plan.A}, {&e.b, plan.B}, {&e.c, plan.C}} {
		if err := f.lt("cublasLtMatrixLayoutCreate", f.ltMatrixLayoutCreate, uintptr(unsafe.Pointer(l.p)),
			uintptr(uint32(l.l.Type)), uintptr(l.l.Rows), uintptr(l.l.Cols), uintptr(l.l.LD)); err != nil {
			return fail(err)
		}
	}
	var found int32
	if err := f.lt("cublasLtMatmulAlgoGetHeuristic", f.ltAlgoGetHeuristic, d.lt, d.ltDesc, e.a, e.b, e.c, e.c,
		d.ltPref, 1, uintptr(unsafe.Pointer(&e.heur)), uintptr(unsafe.Pointer(&found))); err != nil {
		return fail(err)
	}
	if found == 0 || e.heur.state != 0 {
		return fail(errors.New("cuBLASLt has no algorithm for this shape within a 32 MiB workspace"))
	}
	d.gemms[key] = e
	return e, nil
}

func (d *gpuDriver) dropGemm(e *gemmEntry) {
	for _, l := range []uintptr{e.a, e.b, e.c} {
		if l != 0 {
			d.warn(d.f.lt("cublasLtMatrixLayoutDestroy", d.f.ltMatrixLayoutDestroy, l))
		}
	}
}

func (d *gpuDriver) dropGemms() {
	for k, e := range d.gemms {
		d.dropGemm(e)
		delete(d.gemms, k)
	}
}

func (d *gpuDriver) Gemm(g Gemm) error {
	return d.thread.do(func() error {
		e, err := d.gemm(g)
		if err != nil {
			return err
		}
		// e is on the heap and kept in d.gemms; the scalars are pinned.
		err = d.f.lt("cublasLtMatmul", d.f.ltMatmul, d.lt, d.ltDesc,
			uintptr(unsafe.Pointer(&d.scalars[0])), uintptr(g.W), e.a, uintptr(g.X), e.b,
			uintptr(unsafe.Pointer(&d.scalars[1])), uintptr(g.Out), e.c, uintptr(g.Out), e.c,
			uintptr(unsafe.Pointer(&e.heur.algo)), uintptr(d.workspace), gemmWorkspaceBytes, d.stream)
		if err != nil {
			return fmt.Errorf("gemm %d×%d×%d %s: %w", g.M, g.N, g.K, g.Type, err)
		}
		return nil
	})
}

func (d *gpuDriver) Sync() error {
	return d.thread.do(func() error {
		return d.f.cu("cuStreamSynchronize", d.f.streamSynchronize, d.stream)
	})
}

// gpuGraph is an instantiated CUDA graph.
type gpuGraph struct {
	d           *gpuDriver
	graph, exec uintptr
}

func (g *gpuGraph) Destroy() {
	if g.d == nil {
		return
	}
	d := g.d
	g.d = nil
	_ = d.thread.do(func() error { // a closed driver's context took its graphs along
		d.destroyGraph(g.graph, g.exec)
		return nil
	})
}

func (d *gpuDriver) destroyGraph(graph, exec uintptr) {
	if exec != 0 {
		d.warn(d.f.cu("cuGraphExecDestroy", d.f.graphExecDestroy, exec))
	}
	if graph != 0 {
		d.warn(d.f.cu("cuGraphDestroy", d.f.graphDestroy, graph))
	}
}

// Capture brackets fn with cuStreamBeginCapture (thread-local mode) and
// cuStreamEndCapture. fn runs on the caller's goroutine; its Launch and
// Gemm calls reach the capturing thread through d.thread like any other.
func (d *gpuDriver) Capture(fn func() error) (Graph, error) {
	err := d.thread.do(func() error {
		return d.f.cu("cuStreamBeginCapture", d.f.streamBeginCapture, d.stream, cuCaptureThreadLocal)
	})
	if err != nil {
		return nil, err
	}
	fnErr := fn()
	g := &gpuGraph{d: d}
	err = d.thread.do(func() error {
		if err := d.f.cu("cuStreamEndCapture", d.f.streamEndCapture, d.stream, uintptr(unsafe.Pointer(&g.graph))); err != nil {
			return err
		}
		if fnErr != nil {
			return nil
		}
		return d.f.cu("cuGraphInstantiateWithFlags", d.f.graphInstantiate, uintptr(unsafe.Pointer(&g.exec)), g.graph, 0)
	})
	if fnErr != nil || err != nil {
		_ = d.thread.do(func() error { d.destroyGraph(g.graph, g.exec); return nil })
		if fnErr != nil {
			return nil, fmt.Errorf("capture: %w", errors.Join(fnErr, err))
		}
		return nil, fmt.Errorf("capture: %w", err)
	}
	return g, nil
}

func (d *gpuDriver) Replay(g Graph) error {
	gg, ok := g.(*gpuGraph)
	if !ok || gg.d != d {
		return errors.New("replay: a graph this driver did not capture, or one destroyed")
	}
	return d.thread.do(func() error {
		return d.f.cu("cuGraphLaunch", d.f.graphLaunch, gg.exec, d.stream)
	})
}

// Close waits for the stream, then releases everything open built, in
// reverse, and ends the thread.
func (d *gpuDriver) Close() {
	d.thread.stop(func() {
		if d.stream != 0 {
			d.warn(d.f.cu("cuStreamSynchronize", d.f.streamSynchronize, d.stream))
		}
		for i := len(d.cleanup) - 1; i >= 0; i-- {
			d.cleanup[i]()
		}
		d.cleanup = nil
	})
}

// Built is whether this binary can use NVIDIA GPUs (the "cuda" tag).
const Built = true
