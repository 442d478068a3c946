package cuda

// maxHeadDim is the widest head paged_attention takes.
const maxHeadDim = 256

// attentionLaunch is paged_attention's block size and dynamic shared
// memory for heads of headDim and GQA groups of group query heads
// (csrc/attention.cu documents the shape).
func attentionLaunch(headDim, group int) (Dim3, uint32) {
	return Dim3{128, 1, 1}, 0
}
