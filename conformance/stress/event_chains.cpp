// stress.events.chain: a long chain of event waits hopping across streams;
// each link's host function checks it runs exactly after the previous one.
#include <atomic>
#include <chrono>

#include "check.hpp"
#include "context.hpp"
#include "hal_objects.hpp"

namespace halconform {
namespace {

struct Link {
  std::atomic<uint64_t>* counter;
  std::atomic<uint64_t>* out_of_order;
  uint64_t position;
};

void check_link(void* user_data) {
  auto* link = static_cast<Link*>(user_data);
  if (link->counter->load() != link->position) link->out_of_order->fetch_add(1);
  link->counter->store(link->position + 1);
}

}  // namespace

HALCONFORM_TEST("stress.events.chain",
                "a chain of thousands of event waits across 8 streams runs strictly in order",
                {.capabilities = HAL_DEVICE_CAP_HOST_CALLBACKS}) {
  constexpr int kStreams = 8;
  constexpr uint64_t kMaxLinks = 20000;
  std::vector<Stream> streams;
  std::vector<Event> events;
  for (int i = 0; i < kStreams; ++i) {
    streams.emplace_back(ctx.device());
    events.emplace_back(ctx.device());
  }
  std::atomic<uint64_t> counter{0}, out_of_order{0};
  std::vector<Link> links;
  links.reserve(kMaxLinks);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(ctx.stress_seconds() / 2);
  HostGate gate;  // the whole chain is enqueued before any of it runs
  gate.enqueue_on(streams[0]);
  uint64_t length = 0;
  for (; length < kMaxLinks && std::chrono::steady_clock::now() < deadline; ++length) {
    const int s = static_cast<int>(length % kStreams);
    if (length > 0) {
      HC_OK(hal_stream_wait_event(streams[s], events[(length - 1) % kStreams]));
    }
    links.push_back(Link{&counter, &out_of_order, length});
    HC_OK(hal_stream_enqueue_host_fn(streams[s], check_link, &links.back()));
    HC_OK(hal_event_record(events[s], streams[s]));
  }
  gate.release();  // checked after the drain: |links| must outlive the chain
  HC_OK(hal_event_synchronize(events[(length - 1) % kStreams]));
  HC_OK(hal_device_synchronize(ctx.device()));
  gate.open();
  HC_REQUIRE(out_of_order.load() == 0 && counter.load() == length,
             strf("%llu of %llu links ran out of order (%llu ran)",
                  static_cast<unsigned long long>(out_of_order.load()),
                  static_cast<unsigned long long>(length),
                  static_cast<unsigned long long>(counter.load())));
  ctx.note(strf("%llu links across %d streams", static_cast<unsigned long long>(length), kStreams));
}

}  // namespace halconform
