package cuda

// Open opens GPU ordinal (0 is the first) with batchd's kernels loaded: the
// Device the native engine runs on. Without a usable GPU the error wraps
// ErrNoDevice and says what is missing.
func Open(ordinal int) (*Device, error) {
	drv, err := OpenDriver(ordinal, modulePTX)
	if err != nil {
		return nil, err
	}
	return NewDevice(drv), nil
}
