/* libcuda.so.1 for a machine without an NVIDIA driver: the twin's stand-in, nothing more.
 *
 * NIXL 1.3.1's LIBFABRIC plugin links the CUDA driver API (libplugin_LIBFABRIC.so needs
 * libcuda.so.1 for cuPointerGetAttributes, cuDeviceGetPCIBusId and cuCtxSetCurrent), so without
 * a driver the plugin does not load at all. It calls them only for VRAM_SEG registrations
 * (nixl v1.3.1 src/plugins/libfabric/libfabric_backend.cpp, cudaQueryAddr and cudaSetCtx); the
 * twin registers host memory (kv_buffer_device: cpu), so every call answering "no device"
 * is the truth on this machine. Built by `make twin` with the system C compiler.
 */
#define CUDA_ERROR_NO_DEVICE 100

int cuPointerGetAttributes(unsigned int n, void *attributes, void **data, unsigned long long ptr) {
    (void)n; (void)attributes; (void)data; (void)ptr;
    return CUDA_ERROR_NO_DEVICE;
}

int cuDeviceGetPCIBusId(char *bus_id, int length, int device) {
    (void)device;
    if (bus_id && length > 0) bus_id[0] = '\0';
    return CUDA_ERROR_NO_DEVICE;
}

int cuCtxSetCurrent(void *context) {
    (void)context;
    return CUDA_ERROR_NO_DEVICE;
}
