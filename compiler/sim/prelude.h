// tinyhw CXXRTL prelude: what the driver (driver.cc) and every bundle of designs share. It is
// compiled once per C++ compiler and flags into a precompiled header (compiler/sim/cxxrtl.py
// `runtime`), so a bundle's compile parses none of it again; the driver is compiled once into an
// object file against the `Sim` calls below, so a bundle compiles only its designs.
#ifndef TINYHW_PRELUDE_H
#define TINYHW_PRELUDE_H
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <cxxrtl/cxxrtl.h>

namespace tinyhw {

// A design as the driver runs it: its clock, start and done ports (compiler/hw/top.py names
// them), one settling pass, the commit, a full step, and its debug items (to find memories).
struct Sim {
  virtual ~Sim() {}
  virtual void debug_info(cxxrtl::debug_items &items) = 0;
  virtual void set_clk(bool v) = 0;
  virtual void set_start(bool v) = 0;
  virtual bool done() = 0;
  virtual bool eval() = 0;          // true if it settled in this one pass
  virtual bool commit() = 0;
  virtual void step() = 0;
};

// One virtual call per operation: a few nanoseconds a cycle against the design's eval().
template <class Top> struct Of final : Sim {
  Top top;
  void debug_info(cxxrtl::debug_items &items) override { top.debug_info(&items, nullptr, ""); }
  void set_clk(bool v) override { top.p_clk.template set<bool>(v); }
  void set_start(bool v) override { top.p_start.template set<bool>(v); }
  bool done() override { return top.p_done.template get<bool>(); }
  bool eval() override { return top.eval(); }
  bool commit() override { return top.commit(); }
  void step() override { top.step(); }
};

template <class Top> Sim *make() { return new Of<Top>; }

struct Entry {                      // a design of a bundle: its cache key and its constructor
  const char *key;
  Sim *(*make)();
};

}  // namespace tinyhw

extern const tinyhw::Entry tinyhw_designs[];   // defined by each bundle's sim.cc
extern const size_t tinyhw_n_designs;

#endif
