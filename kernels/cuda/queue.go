package cuda

import (
	"fmt"
	"hash/maphash"
	"slices"
)

// queue sits between Device and the Driver: launches and GEMMs either run
// at once or, during a pass (Device.BeginPass), are recorded and run when
// the pass's results are downloaded. A recorded pass whose launch list has
// been seen before, argument for argument, replays as one CUDA graph
// instead of hundreds of launches: decode steps of the same batch size
// repeat exactly (their inputs change only in device memory that is
// uploaded before the replay). Any other driver call first runs what was
// recorded, so recording changes when work is queued, never its order.
type queue struct {
	drv       Driver
	graphs    bool // replay repeated passes as graphs
	recording bool
	ops       []op
	args      []Arg
	cache     map[uint64]*graphEntry
	clock     int64 // for least-recently-used eviction
	seed      maphash.Seed
	stats     GraphStats
	before    func() error // uploads the staged inputs before recorded launches run
}

// op is one recorded launch or GEMM.
type op struct {
	gemm         bool
	g            Gemm
	name         string
	grid, block  Dim3
	shared       uint32
	argLo, argHi int
}

// graphEntry is a launch list seen before, and its graph once captured.
type graphEntry struct {
	ops   []op
	args  []Arg
	seen  int
	used  int64
	graph Graph
}

// GraphStats counts what passes became: replays of a captured graph,
// captures, and passes run launch by launch.
type GraphStats struct {
	Replayed, Captured, Direct int64
	Graphs                     int // graphs held
}

// maxGraphs bounds the graphs held (each holds device resources); the
// least recently used goes first.
const maxGraphs = 32

func newQueue(drv Driver, graphs bool) *queue {
	return &queue{drv: drv, graphs: graphs, cache: map[uint64]*graphEntry{}, seed: maphash.MakeSeed()}
}

func (q *queue) launch(name string, grid, block Dim3, shared uint32, args []Arg) error {
	if !q.recording {
		return q.drv.Launch(name, grid, block, shared, args...)
	}
	lo := len(q.args)
	q.args = append(q.args, args...)
	q.ops = append(q.ops, op{name: name, grid: grid, block: block, shared: shared, argLo: lo, argHi: len(q.args)})
	return nil
}

func (q *queue) gemm(g Gemm) error {
	if !q.recording {
		return q.drv.Gemm(g)
	}
	q.ops = append(q.ops, op{gemm: true, g: g})
	return nil
}

// run queues ops directly.
func (q *queue) run(ops []op, args []Arg) error {
	for _, o := range ops {
		var err error
		if o.gemm {
			err = q.drv.Gemm(o.g)
		} else {
			err = q.drv.Launch(o.name, o.grid, o.block, o.shared, args[o.argLo:o.argHi]...)
		}
		if err != nil {
			if o.gemm {
				return fmt.Errorf("gemm %dx%dx%d: %w", o.g.M, o.g.N, o.g.K, err)
			}
			return fmt.Errorf("%s: %w", o.name, err)
		}
	}
	return nil
}

// flush queues what was recorded and stops recording; at the end of a
// pass (pass true) a launch list seen before replays as a graph, captured
// the second time it is seen.
func (q *queue) flush(pass bool) error {
	if pass {
		q.recording = false
	}
	if len(q.ops) == 0 {
		return nil
	}
	ops, args := q.ops, q.args
	q.ops, q.args = q.ops[:0], q.args[:0]
	if q.before != nil {
		if err := q.before(); err != nil {
			return err
		}
	}
	if !pass || !q.graphs {
		q.stats.Direct++
		return q.run(ops, args)
	}
	h := q.hash(ops, args)
	e := q.cache[h]
	if e != nil && !(slices.Equal(e.ops, ops) && slices.Equal(e.args, args)) {
		e = nil // a collision: run it directly
		q.stats.Direct++
		return q.run(ops, args)
	}
	q.clock++
	if e == nil {
		q.evict()
		q.cache[h] = &graphEntry{ops: slices.Clone(ops), args: slices.Clone(args), seen: 1, used: q.clock}
		q.stats.Direct++
		return q.run(ops, args)
	}
	e.seen++
	e.used = q.clock
	if e.graph == nil {
		g, err := q.drv.Capture(func() error { return q.run(e.ops, e.args) })
		if err != nil {
			return fmt.Errorf("capture a pass of %d launches: %w", len(ops), err)
		}
		e.graph = g
		q.stats.Captured++
	} else {
		q.stats.Replayed++
	}
	return q.drv.Replay(e.graph)
}

// evict makes room for one more entry.
func (q *queue) evict() {
	for len(q.cache) >= maxGraphs {
		var oldest uint64
		var o *graphEntry
		for h, e := range q.cache {
			if o == nil || e.used < o.used {
				oldest, o = h, e
			}
		}
		if o.graph != nil {
			o.graph.Destroy()
		}
		delete(q.cache, oldest)
	}
}

func (q *queue) hash(ops []op, args []Arg) uint64 {
	var h maphash.Hash
	h.SetSeed(q.seed)
	for _, o := range ops {
		if o.gemm {
			maphash.WriteComparable(&h, o.g)
			continue
		}
		h.WriteString(o.name)
		maphash.WriteComparable(&h, [7]uint32{o.grid.X, o.grid.Y, o.grid.Z, o.block.X, o.block.Y, o.block.Z, o.shared})
	}
	for _, a := range args {
		maphash.WriteComparable(&h, a)
	}
	return h.Sum64()
}

// close destroys the graphs.
func (q *queue) close() {
	for h, e := range q.cache {
		if e.graph != nil {
			e.graph.Destroy()
		}
		delete(q.cache, h)
	}
}
