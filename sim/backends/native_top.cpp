// The native backend's C++ top: one Verilated model per instance, stepped together.
//
// Every distinct Verilog module (the glue, the die with its cores, each link
// and switch kind) is Verilated once; this file creates one object per
// instance and copies ports between them. The netlist file (written by
// sim/backends/native.py) has the lines
//   inst KIND NAME              one object each, instance 0 the glue
//   const INDEX PORT WORDS...   a constant input (a die's rank, a route table)
//   wire A PORT B PORT          output of instance A drives input of B directly
//   alias NAME A PORT           machine port NAME is instance A's output
//   skip_idle 0|1               skip the edges of instances whose `idle` is 1
//   threads N                   evaluate instances on N threads (default 1)
// and every other instance port meets glue port n<i-1>_<port>.
// A cycle is a rising edge of every model not idle, then a settle: each
// model whose inputs changed is evaluated and its changed outputs copied on,
// until nothing changes (the fixed point the flat model computes in one eval).
// With N > 1 threads each phase's evaluations (the rising edge, each settle
// round) run on N threads, and the copies between instances after them on one:
// every model only reads its own inputs and writes its own state and outputs,
// so the evaluations of a phase are independent. A threaded settle is Jacobi
// (a round evaluates every instance dirty at its start) rather than
// Gauss-Seidel: more rounds, the same fixed point, the same cycles.
// The per-kind port tables and the factory come from the generated
// native_bind.cpp (sim/backends/native.py). Driven from Python by ctypes.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <thread>
#include <fstream>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "native_bind.h"

namespace {

struct Conn {
    const uint8_t* src;
    uint8_t* dst;
    uint32_t bytes;
    uint32_t dst_inst;
};

// Threads that evaluate a list of instances with the caller: `run` returns once
// every instance of the list is evaluated. Workers spin briefly between phases
// (a phase is every ~0.1-1 ms on a large machine), then sleep.
class Pool {
public:
    explicit Pool(int workers) {
        for (int t = 0; t < workers; t++) threads_.emplace_back([this] { work(); });
    }
    ~Pool() {
        {
            std::lock_guard<std::mutex> lock(mu_);
            stop_ = true;
            gen_.fetch_add(1);
        }
        cv_.notify_all();
        for (auto& t : threads_) t.join();
    }
    size_t size() const { return threads_.size(); }
    void run(std::vector<Inst>& inst, const std::vector<uint32_t>& list) {
        inst_ = &inst;
        list_ = &list;
        next_.store(0);
        busy_.store((int)threads_.size());
        {
            std::lock_guard<std::mutex> lock(mu_);
            gen_.fetch_add(1);
        }
        cv_.notify_all();
        grab();
        while (busy_.load(std::memory_order_acquire)) {}
    }

private:
    void grab() {
        const auto& list = *list_;
        for (size_t k; (k = next_.fetch_add(1)) < list.size();) (*inst_)[list[k]].eval();
    }
    void work() {
        uint64_t seen = 0;
        for (;;) {
            uint64_t g;
            int spins = 0;
            while ((g = gen_.load(std::memory_order_acquire)) == seen && ++spins < 20000) {}
            if (g == seen) {
                std::unique_lock<std::mutex> lock(mu_);
                cv_.wait(lock, [&] { return gen_.load() != seen; });
                g = gen_.load();
            }
            seen = g;
            if (stop_) return;
            grab();
            busy_.fetch_sub(1, std::memory_order_release);
        }
    }
    std::vector<std::thread> threads_;
    std::mutex mu_;
    std::condition_variable cv_;
    std::atomic<uint64_t> gen_{0};
    std::atomic<size_t> next_{0};
    std::atomic<int> busy_{0};
    bool stop_ = false;
    std::vector<Inst>* inst_ = nullptr;
    const std::vector<uint32_t>* list_ = nullptr;
};

struct Machine {
    VerilatedContext ctx;
    std::vector<Inst> inst;              // [0] is the glue
    std::vector<std::vector<Conn>> out;  // connections by source instance
    std::vector<uint8_t> dirty;
    std::vector<uint8_t> skipped;        // this cycle's skipped edges
    std::vector<uint64_t> inst_skips;    // skipped edges of each instance
    bool skip_idle = true;               // netlist "skip_idle 0" turns skipping off
    std::unordered_map<std::string, int> port_index;   // the machine's ports by name
    std::vector<std::pair<const Port*, uint32_t>> ports;  // (port, owning instance)
    std::string error;
    uint64_t evals = 0, cycles = 0, settle_rounds = 0, skips = 0;
    int max_rounds = 0;                  // most settle rounds one cycle needed
    Pool* pool = nullptr;                // netlist "threads N", N > 1: N - 1 workers
    std::vector<uint32_t> list;          // a threaded phase's instances

    ~Machine() {
        delete pool;
        for (auto& i : inst) i.destroy();
    }

    // Evaluate `list` on the pool's threads and this one.
    void eval_list() {
        if (list.empty()) return;
        if (list.size() == 1) inst[list[0]].eval();
        else pool->run(inst, list);
        evals += list.size();
    }

    // Copy instance i's changed outputs on, marking their destinations dirty.
    bool propagate(size_t i) {
        bool any = false;
        for (const Conn& c : out[i]) {
            if (std::memcmp(c.dst, c.src, c.bytes)) {
                std::memcpy(c.dst, c.src, c.bytes);
                dirty[c.dst_inst] = 1;
                any = true;
            }
        }
        return any;
    }

    bool settle() {
        if (pool) return settle_threaded();
        for (int round = 0;; round++) {
            bool any = false;
            for (size_t i = 0; i < inst.size(); i++) {
                if (!dirty[i]) continue;
                dirty[i] = 0;
                inst[i].eval();
                evals++;
                any |= propagate(i);
            }
            if (!any) {
                settle_rounds += round + 1;
                if (round + 1 > max_rounds) max_rounds = round + 1;
                return true;
            }
            if (round > 10000) {
                error = "ports between instances do not settle: a combinational loop through the glue";
                return false;
            }
        }
    }

    // settle() with each round's evaluations on the pool (Jacobi: see the top).
    bool settle_threaded() {
        for (int round = 0;; round++) {
            list.clear();
            for (size_t i = 0; i < inst.size(); i++)
                if (dirty[i]) { dirty[i] = 0; list.push_back((uint32_t)i); }
            if (list.empty()) {
                settle_rounds += round + 1;
                if (round + 1 > max_rounds) max_rounds = round + 1;
                return true;
            }
            eval_list();
            for (uint32_t i : list) propagate(i);
            if (round > 10000) {
                error = "ports between instances do not settle: a combinational loop through the glue";
                return false;
            }
        }
    }

    bool tick() {
        if (!settle()) return false;
        // The rising edge. A model whose settled `idle` output is 1 keeps its state
        // over this edge (its inputs are settled too), so its edge is skipped.
        list.clear();
        for (size_t k = 0; k < inst.size(); k++) {
            Inst& i = inst[k];
            skipped[k] = skip_idle && i.idle && *i.idle;
            if (skipped[k]) { skips++; inst_skips[k]++; continue; }
            *i.clk = 1;
            if (pool) { list.push_back((uint32_t)k); continue; }
            i.eval();
            evals++;
        }
        if (pool) eval_list();
        // The falling edge: a model whose edge record is known gets it set directly
        // (nothing in the design acts on it), and only its changed outputs move on.
        for (size_t i = 0; i < inst.size(); i++) {
            if (skipped[i]) continue;
            *inst[i].clk = 0;
            if (!inst[i].clk_prev) { dirty[i] = 1; continue; }
            *inst[i].clk_prev = 0;
            propagate(i);
        }
        cycles++;
        return settle();
    }
};

const Port* find_port(const Inst& inst, const std::string& name) {
    for (const Port& p : inst.ports)
        if (name == p.name) return &p;
    return nullptr;
}

bool build(Machine* m, const char* path) {
    std::ifstream f(path);
    if (!f) { m->error = std::string("cannot read netlist ") + path; return false; }
    std::string line;
    std::vector<std::string> later;     // wires and aliases, once every instance exists
    while (std::getline(f, line)) {
        std::istringstream in(line);
        std::string what;
        in >> what;
        if (what == "inst") {
            std::string kind, name;
            in >> kind >> name;
            Inst i;
            if (!make_inst(kind, &m->ctx, name, &i)) { m->error = "unknown module " + kind; return false; }
            m->inst.push_back(std::move(i));
        } else if (what == "const") {
            size_t idx;
            std::string port;
            in >> idx >> port;
            if (idx >= m->inst.size()) { m->error = "const for a missing instance: " + line; return false; }
            const Port* p = find_port(m->inst[idx], port);
            if (!p || p->out) { m->error = "no input " + port + " on instance " + std::to_string(idx); return false; }
            std::vector<uint32_t> words((p->bytes + 3) / 4 + 1, 0);
            uint32_t w;
            for (size_t k = 0; in >> w && k < words.size(); k++) words[k] = w;
            std::memcpy(p->p, words.data(), p->bytes);
        } else if (what == "threads") {
            int n = 1;
            in >> n;
            if (n < 1 || n > 64) { m->error = "threads must be 1..64: " + line; return false; }
            delete m->pool;
            m->pool = n > 1 ? new Pool(n - 1) : nullptr;
        } else if (what == "skip_idle") {
            int on = 1;
            in >> on;
            m->skip_idle = on != 0;
        } else if (what == "wire" || what == "alias") {
            later.push_back(line);
        } else if (!what.empty()) {
            m->error = "bad netlist line: " + line;
            return false;
        }
    }
    if (m->inst.empty()) { m->error = "netlist has no glue"; return false; }
    m->out.resize(m->inst.size());
    m->dirty.assign(m->inst.size(), 1);
    m->skipped.assign(m->inst.size(), 0);
    m->inst_skips.assign(m->inst.size(), 0);
    const Inst& glue = m->inst[0];
    for (size_t k = 0; k < glue.ports.size(); k++) {
        m->port_index[glue.ports[k].name] = (int)k;
        m->ports.push_back({&glue.ports[k], 0});
    }
    for (size_t i = 1; i < m->inst.size(); i++) {
        std::string prefix = "n" + std::to_string(i - 1) + "_";
        for (const Port& p : m->inst[i].ports) {
            auto it = m->port_index.find(prefix + p.name);
            if (it == m->port_index.end()) continue;    // clk, constants, wires
            const Port& g = glue.ports[it->second];
            if (g.bytes != p.bytes || g.out == p.out) {
                m->error = "glue port " + g.name + " does not match " + p.name;
                return false;
            }
            if (p.out) m->out[i].push_back({(const uint8_t*)p.p, (uint8_t*)g.p, p.bytes, 0});
            else m->out[0].push_back({(const uint8_t*)g.p, (uint8_t*)p.p, p.bytes, (uint32_t)i});
        }
    }
    for (const std::string& l : later) {
        std::istringstream in(l);
        std::string what;
        in >> what;
        if (what == "wire") {
            size_t a, b;
            std::string pa, pb;
            in >> a >> pa >> b >> pb;
            const Port* src = a < m->inst.size() ? find_port(m->inst[a], pa) : nullptr;
            const Port* dst = b < m->inst.size() ? find_port(m->inst[b], pb) : nullptr;
            if (!src || !dst || !src->out || dst->out || src->bytes != dst->bytes) {
                m->error = "bad wire: " + l;
                return false;
            }
            m->out[a].push_back({(const uint8_t*)src->p, (uint8_t*)dst->p, src->bytes, (uint32_t)b});
        } else {
            std::string name, pa;
            size_t a;
            in >> name >> a >> pa;
            const Port* src = a < m->inst.size() ? find_port(m->inst[a], pa) : nullptr;
            if (!src || !src->out) { m->error = "bad alias: " + l; return false; }
            m->port_index[name] = (int)m->ports.size();
            m->ports.push_back({src, (uint32_t)a});
        }
    }
    for (auto& i : m->inst) *i.clk = 0;
    return m->settle();
}

}  // namespace

extern "C" {

void* epf_open(const char* netlist) {
    Machine* m = new Machine();
    m->ctx.debug(0);
    build(m, netlist);
    return m;
}

const char* epf_error(void* h) { return static_cast<Machine*>(h)->error.c_str(); }

void epf_close(void* h) { delete static_cast<Machine*>(h); }

int epf_port(void* h, const char* name) {
    Machine* m = static_cast<Machine*>(h);
    auto it = m->port_index.find(name);
    return it == m->port_index.end() ? -1 : it->second;
}

int epf_port_bytes(void* h, int port) { return (int)static_cast<Machine*>(h)->ports[port].first->bytes; }

int epf_set(void* h, int port, const uint8_t* bytes) {
    Machine* m = static_cast<Machine*>(h);
    const Port& p = *m->ports[port].first;
    if (p.out) {
        m->error = "cannot set output " + p.name;
        return -1;
    }
    if (std::memcmp(p.p, bytes, p.bytes)) {
        std::memcpy(p.p, bytes, p.bytes);
        m->dirty[m->ports[port].second] = 1;
    }
    return 0;
}

int epf_get(void* h, int port, uint8_t* bytes) {
    Machine* m = static_cast<Machine*>(h);
    if (!m->settle()) return -1;
    const Port& p = *m->ports[port].first;
    std::memcpy(bytes, p.p, p.bytes);
    return 0;
}

// Tick n cycles; with port >= 0, stop after the first tick that leaves it nonzero.
// Returns the ticks taken, or -1 on an error (epf_error).
int64_t epf_tick(void* h, uint64_t n, int port) {
    Machine* m = static_cast<Machine*>(h);
    const Port* p = port >= 0 ? m->ports[port].first : nullptr;
    for (uint64_t k = 0; k < n; k++) {
        if (!m->tick()) return -1;
        if (p) {
            for (uint32_t b = 0; b < p->bytes; b++)
                if (static_cast<const uint8_t*>(p->p)[b]) return (int64_t)k + 1;
        }
    }
    return (int64_t)n;
}

// Index of memory `name` of instance `inst` (mems_of in native_bind.cpp), or -1.
int epf_mem(void* h, int inst, const char* name) {
    Machine* m = static_cast<Machine*>(h);
    if (inst < 0 || (size_t)inst >= m->inst.size()) return -1;
    const auto& mems = m->inst[inst].mems;
    for (size_t k = 0; k < mems.size(); k++)
        if (mems[k].name == name) return (int)k;
    return -1;
}

// Bytes of one element of memory `mem` of instance `inst`, and its depth.
void epf_mem_shape(void* h, int inst, int mem, uint32_t* out) {
    const Mem& x = static_cast<Machine*>(h)->inst[inst].mems[mem];
    out[0] = x.bytes;
    out[1] = x.depth;
}

// Write `n` bytes at byte `offset` of memory `mem` of instance `inst` (elements are
// contiguous, each little-endian); -1 (epf_error) past its end. Only for memories whose
// reads are clocked or whose every comb read is refreshed by a later real write: the
// models do not see this write happen.
int epf_mem_write(void* h, int inst, int mem, uint64_t offset, const uint8_t* bytes, uint32_t n) {
    Machine* m = static_cast<Machine*>(h);
    const Mem& x = m->inst[inst].mems[mem];
    if (offset + n > (uint64_t)x.bytes * x.depth) {
        m->error = "backdoor write past the end of " + x.name;
        return -1;
    }
    std::memcpy(static_cast<uint8_t*>(x.p) + offset, bytes, n);
    return 0;
}

// Read `n` bytes at byte `offset` of memory `mem` of instance `inst` into `bytes` (the
// read-back backdoor); -1 (epf_error) past its end.
int epf_mem_read(void* h, int inst, int mem, uint64_t offset, uint8_t* bytes, uint32_t n) {
    Machine* m = static_cast<Machine*>(h);
    const Mem& x = m->inst[inst].mems[mem];
    if (offset + n > (uint64_t)x.bytes * x.depth) {
        m->error = "backdoor read past the end of " + x.name;
        return -1;
    }
    std::memcpy(bytes, static_cast<const uint8_t*>(x.p) + offset, n);
    return 0;
}

// evals, cycles, settle rounds, most rounds in one settle, instances, skipped edges, threads
void epf_stats(void* h, uint64_t* out) {
    Machine* m = static_cast<Machine*>(h);
    out[0] = m->evals;
    out[1] = m->cycles;
    out[2] = m->settle_rounds;
    out[3] = (uint64_t)m->max_rounds;
    out[4] = m->inst.size();
    out[5] = m->skips;
    out[6] = m->pool ? m->pool->size() + 1 : 1;
}

// the skipped edges of each instance, in netlist order (out: one entry an instance)
void epf_inst_skips(void* h, uint64_t* out) {
    Machine* m = static_cast<Machine*>(h);
    for (size_t k = 0; k < m->inst_skips.size(); k++) out[k] = m->inst_skips[k];
}

}  // extern "C"
