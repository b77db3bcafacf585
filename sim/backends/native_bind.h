// Interface between the native backend's C++ top (native_top.cpp) and the
// bindings generated for one machine (native_bind.cpp, sim/backends/native.py).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "verilated.h"

// A port of a Verilated model: its Verilog name, the model's storage, size in bytes.
struct Port {
    std::string name;
    void* p;
    uint32_t bytes;
    bool out;
};

// A memory of a Verilated model the testbench may write or read directly (a backdoor: the
// host port's loading and read-back without their cycles): `depth` elements of `bytes` each.
struct Mem {
    std::string name;
    void* p;
    uint32_t bytes;
    uint32_t depth;
};

// One Verilated model object.
struct Inst {
    std::function<void()> eval;
    uint8_t* clk = nullptr;
    // Verilator's record of the clock's last value (its edge trigger), when found:
    // a falling edge is then recorded without an evaluation.
    uint8_t* clk_prev = nullptr;
    // The model's `idle` output, if it has one: 1 promises that the next clock
    // edge changes none of its state (e.g. hw/link.py), so the edge may be skipped.
    const uint8_t* idle = nullptr;
    std::vector<Port> ports;
    std::vector<Mem> mems;
    std::function<void()> destroy = [] {};
};

// A new object of Verilog module `kind` (false: no such module in this build).
bool make_inst(const std::string& kind, VerilatedContext* ctx, const std::string& name, Inst* out);
