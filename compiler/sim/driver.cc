// tinyhw CXXRTL driver: load memories, run start -> done, dump memories. Compiled once per C++
// compiler and flags (compiler/sim/cxxrtl.py `runtime`) and linked with each bundle of designs,
// which defines the table `tinyhw_designs` (prelude.h: a design behind the `tinyhw::Sim` calls).
#include "prelude.h"

using cxxrtl::debug_item;
using cxxrtl::debug_items;

static void fail(int code, const std::string &msg) {
  std::fprintf(stderr, "tinyhw-cxxrtl: %s\n", msg.c_str());
  std::exit(code);
}

struct Reader {
  FILE *f;
  template <class T> T get() {
    T v;
    if (std::fread(&v, sizeof v, 1, f) != 1) fail(2, "truncated input file");
    return v;
  }
  std::string str() {
    uint32_t n = get<uint32_t>();
    std::string s(n, '\0');
    if (n && std::fread(&s[0], 1, n, f) != n) fail(2, "truncated input file");
    return s;
  }
};

static const debug_item &memory_item(const debug_items &items, const std::string &name) {
  if (items.count(name) != 1 || items.at(name)[0].type != debug_item::MEMORY) {
    std::string known;
    for (auto &kv : items.table)
      if (kv.second[0].type == debug_item::MEMORY) known += " '" + kv.first + "'";
    fail(2, "no memory '" + name + "' in the design; memories:" + known);
  }
  return items[name];
}

struct Field {                                // bits [offset, offset + width) of the words from address `first`
  std::string name;
  uint32_t offset, width;
  uint64_t first;
};

static Field read_field(Reader &r) {
  Field f;
  f.name = r.str();
  f.offset = r.get<uint32_t>();
  f.width = r.get<uint32_t>();
  f.first = r.get<uint64_t>();
  if (f.width == 0 || f.width > 64) fail(2, "memory field of '" + f.name + "' is not 1 to 64 bits wide");
  return f;
}

static const debug_item &field_item(const debug_items &items, const Field &f) {
  const debug_item &item = memory_item(items, f.name);
  if (f.offset + f.width > item.width) fail(2, "memory field past the word of '" + f.name + "'");
  return item;
}

// A word of a CXXRTL memory is `stride` 32-bit chunks, least significant first.
static void set_field(uint32_t *word, uint32_t offset, uint32_t width, uint64_t v) {
  for (uint32_t b = 0; b < width;) {
    uint32_t c = (offset + b) / 32, s = (offset + b) % 32, n = std::min(32 - s, width - b);
    uint32_t mask = (n == 32 ? 0xffffffffu : ((1u << n) - 1)) << s;
    word[c] = (word[c] & ~mask) | ((uint32_t)(v >> b) << s & mask);
    b += n;
  }
}

static uint64_t get_field(const uint32_t *word, uint32_t offset, uint32_t width) {
  uint64_t v = 0;
  for (uint32_t b = 0; b < width;) {
    uint32_t c = (offset + b) / 32, s = (offset + b) % 32, n = std::min(32 - s, width - b);
    v |= (uint64_t)((word[c] >> s) & (n == 32 ? 0xffffffffu : ((1u << n) - 1))) << b;
    b += n;
  }
  return v;
}

struct Poke {
  Field field;
  std::vector<uint64_t> words;
};

static std::vector<Poke> read_pokes(Reader &r) {
  std::vector<Poke> pokes(r.get<uint32_t>());
  for (auto &p : pokes) {
    p.field = read_field(r);
    p.words.resize(r.get<uint64_t>());
    size_t n = p.words.size();
    if (n && std::fread(p.words.data(), 8, n, r.f) != n) fail(2, "truncated input file");
  }
  return pokes;
}

static void poke(const debug_items &items, const Poke &p) {
  const debug_item &item = field_item(items, p.field);
  if (p.field.first + p.words.size() > item.depth) fail(2, "too many words for memory '" + p.field.name + "'");
  size_t stride = (item.width + 31) / 32;
  for (size_t i = 0; i < p.words.size(); i++)  // set_field masks (value<>::set does not)
    set_field(&item.curr[(p.field.first + i) * stride], p.field.offset, p.field.width, p.words[i]);
}

// One run: a fresh design (every register and memory at its initial value, as in a run of its
// own), the base pokes, then the run's own, start -> done, and the read memories appended to `out`.
static void run_once(const std::vector<Poke> &base, const std::vector<Poke> &own,
                     const std::vector<std::pair<Field, uint64_t>> &reads,
                     uint64_t max_cycles, uint32_t flags, FILE *out, tinyhw::Sim *(*make)()) {
  std::unique_ptr<tinyhw::Sim> holder(make());
  tinyhw::Sim &top = *holder;
  debug_items items;
  top.debug_info(items);
  for (auto &p : base) poke(items, p);
  for (auto &p : own) poke(items, p);
  std::vector<const debug_item *> read_items;
  for (auto &rd : reads) {
    const debug_item &item = field_item(items, rd.first);
    if (rd.first.first + rd.second > item.depth) fail(2, "reading past the end of memory '" + rd.first.name + "'");
    read_items.push_back(&item);
  }

  // Counted as run_pysim counts: start is high in cycle 0, `cycles` is the number of the cycle
  // in which done is high, i.e. the rising edges from the start edge up to that cycle's edge.
  auto t0 = std::chrono::steady_clock::now();
  top.set_clk(false);
  top.set_start(true);
  // A flattened design without feedback wires settles in one eval() (it says so by returning
  // true): then one eval per cycle, at the rising edge, is exact; the falling edge only needs a
  // commit to record the clock level. Otherwise step() settles every half cycle.
  bool one_pass = top.eval() && !(flags & 1);
  top.commit();
  uint64_t cycles = 0;
  if (one_pass) {
    for (;;) {
      top.set_clk(true);
      top.eval();                             // comb outputs still show the cycle before the edge
      top.commit();
      bool done = top.done();
      top.set_clk(false);
      top.commit();
      if (cycles > 0 && done) break;
      cycles++;
      top.set_start(false);
      if (cycles > max_cycles) fail(3, "done not reached after " + std::to_string(max_cycles) + " cycles");
    }
  } else {
    top.step();
    for (;;) {
      top.set_clk(true);
      top.step();
      cycles++;
      top.set_start(false);
      top.set_clk(false);
      top.step();
      if (top.done()) break;
      if (cycles >= max_cycles) fail(3, "done not reached after " + std::to_string(max_cycles) + " cycles");
    }
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  std::fwrite(&cycles, 8, 1, out);
  std::fwrite(&seconds, 8, 1, out);
  std::vector<uint64_t> words;
  for (size_t j = 0; j < reads.size(); j++) {
    const debug_item &item = *read_items[j];
    const Field &f = reads[j].first;
    size_t stride = (item.width + 31) / 32;
    words.resize(reads[j].second);
    for (uint64_t i = 0; i < reads[j].second; i++) words[i] = get_field(&item.curr[(f.first + i) * stride], f.offset, f.width);
    std::fwrite(words.data(), 8, words.size(), out);
  }
}

static void run(Reader &r, const char *out_path, tinyhw::Sim *(*make)()) {
  uint64_t max_cycles = r.get<uint64_t>();
  uint32_t flags = r.get<uint32_t>();         // bit 0: settle with step() even if one pass would do
  std::vector<Poke> base = read_pokes(r);
  uint32_t nruns = r.get<uint32_t>();
  std::vector<std::vector<Poke>> runs(nruns);
  for (auto &own : runs) own = read_pokes(r);
  std::vector<std::pair<Field, uint64_t>> reads(r.get<uint32_t>());
  for (auto &rd : reads) {
    rd.first = read_field(r);
    rd.second = r.get<uint64_t>();
  }
  FILE *out = std::fopen(out_path, "wb");
  if (!out) fail(2, std::string("cannot open ") + out_path);
  std::fwrite("TNHWOUT2", 1, 8, out);
  uint64_t n = nruns;
  std::fwrite(&n, 8, 1, out);
  for (auto &own : runs) run_once(base, own, reads, max_cycles, flags, out, make);
  if (std::fclose(out) != 0) fail(2, "cannot write output file");
}

// schedule=dataflow (compiler/hw/dataflow.py): one fresh design, the base pokes, then beats back to
// back with `start` held high. Before beat t starts (in the cycle whose state shows the previous
// beat's done, which is also beat t's first) its pokes land; after its done its reads are taken.
// Writes per beat: the cycle of its done (counted from the first start cycle as 0), then the reads.
static void stream(Reader &r, const char *out_path, tinyhw::Sim *(*make)()) {
  uint64_t max_cycles = r.get<uint64_t>();
  uint32_t flags = r.get<uint32_t>();
  std::vector<Poke> base = read_pokes(r);
  uint32_t nbeats = r.get<uint32_t>();
  std::vector<std::vector<Poke>> pokes(nbeats);
  std::vector<std::vector<std::pair<Field, uint64_t>>> reads(nbeats);
  for (uint32_t t = 0; t < nbeats; t++) {
    pokes[t] = read_pokes(r);
    reads[t].resize(r.get<uint32_t>());
    for (auto &rd : reads[t]) {
      rd.first = read_field(r);
      rd.second = r.get<uint64_t>();
    }
  }
  FILE *out = std::fopen(out_path, "wb");
  if (!out) fail(2, std::string("cannot open ") + out_path);
  std::fwrite("TNHWSTRO", 1, 8, out);
  uint64_t n = nbeats;
  std::fwrite(&n, 8, 1, out);
  std::unique_ptr<tinyhw::Sim> holder(make());
  tinyhw::Sim &top = *holder;
  debug_items items;
  top.debug_info(items);
  for (auto &p : base) poke(items, p);
  if (nbeats) for (auto &p : pokes[0]) poke(items, p);
  top.set_clk(false);
  top.set_start(nbeats > 0);
  bool one_pass = top.eval() && !(flags & 1);
  top.commit();
  uint64_t cycles = 0;
  std::vector<uint64_t> words;
  for (uint32_t t = 0; t < nbeats;) {
    top.set_clk(true);
    if (one_pass) {
      top.eval();
      top.commit();
    } else {
      top.step();
    }
    cycles++;
    bool done = top.done();
    if (done) {
      std::fwrite(&cycles, 8, 1, out);
      for (auto &rd : reads[t]) {
        const debug_item &item = field_item(items, rd.first);
        if (rd.first.first + rd.second > item.depth) fail(2, "reading past the end of memory '" + rd.first.name + "'");
        size_t stride = (item.width + 31) / 32;
        words.resize(rd.second);
        for (uint64_t i = 0; i < rd.second; i++)
          words[i] = get_field(&item.curr[(rd.first.first + i) * stride], rd.first.offset, rd.first.width);
        std::fwrite(words.data(), 8, words.size(), out);
      }
      t++;
      if (t < nbeats) for (auto &p : pokes[t]) poke(items, p);
      else top.set_start(false);
    }
    top.set_clk(false);
    if (one_pass) top.commit(); else top.step();
    if (cycles > max_cycles) fail(3, "beat " + std::to_string(t) + " not done after " + std::to_string(max_cycles) + " cycles");
  }
  if (std::fclose(out) != 0) fail(2, "cannot write output file");
}

int main(int argc, char **argv) {
  if (argc != 3) fail(2, "usage: sim INPUT OUTPUT");
  FILE *in = std::fopen(argv[1], "rb");
  if (!in) fail(2, std::string("cannot open ") + argv[1]);
  Reader r{in};
  char magic[8];
  if (std::fread(magic, 1, 8, in) != 8) fail(2, "bad input file");
  bool streaming = std::memcmp(magic, "TNHWSTR1", 8) == 0;
  if (!streaming && std::memcmp(magic, "TNHWIN05", 8) != 0) fail(2, "bad input file");
  std::string key = r.str();
  for (size_t i = 0; i < tinyhw_n_designs; i++)
    if (key == tinyhw_designs[i].key) {
      (streaming ? stream : run)(r, argv[2], tinyhw_designs[i].make);
      return 0;
    }
  fail(2, "design " + key + " is not in this binary");
}
