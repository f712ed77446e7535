// Parallel regions for the C++ backend (internal to hal_dialect): the plan
// that turns a kernel with barriers into a block function of work-item loops
// over barrier-free regions (SPEC.md, "Work-items and barriers on the cpu
// plugin"). plan_regions decides whether a kernel can be split; the emitter
// (emit_cpp.cpp) writes the plan out.
#ifndef HAL_DIALECT_REGIONS_HPP_
#define HAL_DIALECT_REGIONS_HPP_

#include <string>
#include <vector>

#include "hal_dialect/program.hpp"

namespace hal::dialect {

// Where a variable declared at the top level of a region lives.
enum class Storage : uint8_t {
  kLocal,           // used only in its own region: a plain local of that region
  kRematerialised,  // a pure function of ids, parameters and uniform loop variables that
                    // is never written: its declaration is repeated in each later region
                    // that uses it
  kPerItem,         // an array with one element per work-item of the block; in each region
                    // that uses it, a scalar whose address no pointer keeps is a local copy
                    // of its element, written back at the region's end (by_value())
};

// One declarator of a declaration at the top level of a region.
struct RegionVariable {
  std::string name;
  size_t name_token = 0;
  size_t declaration = 0;  // index into RegionPlan::declarations
  Range declarator;        // pointer stars, qualifiers, the name and array extents
  Range init;              // the initialiser after '=' (empty when there is none)
  bool array = false;
  bool pointer = false;
  bool escapes = false;  // its address is taken or it is an array: a pointer may outlive a region
  int region = 0;        // the declaring region
  int loop = -1;         // the split loop whose body declares it; -1: the kernel body
  Storage storage = Storage::kLocal;

  // A per-item value that regions copy in and write back rather than bind by
  // reference: the copy is a register the compiler can see does not alias
  // anything, so the work-item loop vectorises (through a reference to the
  // slot, every store may alias every other per-item array, and GCC gives up
  // on the loop once a region writes several of them).
  bool by_value() const { return storage == Storage::kPerItem && !array && !escapes; }
};

// A declaration statement at the top level of a region.
struct RegionDeclaration {
  Range statement;  // through the ';'
  Range specifiers;
  std::vector<size_t> variables;  // indices into RegionPlan::variables
};

// The statements between two barriers (or a barrier and the start or end of
// the kernel body or of a split loop's body).
struct Region {
  std::vector<Range> statements;  // top-level statements; `shared` declarations excluded
  int loop = -1;                  // the split loop it belongs to; -1: the kernel body
  std::vector<size_t> bound;      // per-item variables it uses: bound by reference
  std::vector<size_t> repeated;   // rematerialised variables it needs, in declaration order
  bool returns = false;           // contains `return` (only the last region may)

  // Interleaving (plan_interleaving in regions.cpp): statements[interleaved]
  // is a `for` whose header is uniform and whose body cannot jump out of an
  // iteration. The region then also runs |copies| work-items at once:
  // each copy of the region's code has its own instance of every name in
  // |renamed| (suffix _0, _1, ...), and the copies share one run of the loop,
  // each iteration running every copy's body in turn. A loop-carried sum per
  // work-item then gives |copies| independent chains instead of one. -1:
  // the region runs one work-item at a time.
  int interleaved = -1;
  int copies = 0;
  Range interleaved_body;            // the body of statements[interleaved]
  std::vector<std::string> renamed;  // sorted
};

// How many independent chains an interleaved region aims for: enough to
// cover the FMA latency on both pipes. A region carrying c per-item values
// by value runs kInterleaveChains / c work-items together, so that its
// chains still fit the registers; under kMinInterleave it is not
// interleaved (the plain region loop already runs two rows together).
inline constexpr int kInterleaveChains = 8;
inline constexpr int kMinInterleave = 4;

// A top-level `for` or `while` whose header is uniform across the block's
// work-items and whose body has barriers at its top level only.
struct SplitLoop {
  Range header;                        // from `for`/`while` through the ')'
  std::vector<std::string> induction;  // names the for-init declares
  std::vector<size_t> regions;
  std::vector<size_t> header_reads;  // per-item variables the header reads (work-item 0's)
};

struct RegionPlan {
  struct Step {
    bool loop;  // loops[index] when true, regions[index] otherwise
    size_t index;
  };
  std::vector<Step> steps;
  std::vector<Region> regions;
  std::vector<SplitLoop> loops;
  std::vector<RegionVariable> variables;
  std::vector<RegionDeclaration> declarations;

  // The declaration whose statement starts at |token|, or nullptr.
  const RegionDeclaration* declaration_at(size_t token) const;
  size_t per_item_count() const;
};

// Splits |kernel| (which uses barrier()) into parallel regions. False, with
// |why| (for the log), when the kernel keeps the coroutine shape.
bool plan_regions(const Program& program, const Kernel& kernel, RegionPlan& plan, std::string& why);

// Whether |kernel|'s body may write its parameter |name| (an assignment,
// ++/--, or its address taken).
bool parameter_written(const Program& program, const Kernel& kernel, const std::string& name);

}  // namespace hal::dialect

#endif  // HAL_DIALECT_REGIONS_HPP_
