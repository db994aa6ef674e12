#include "verbsim/sim/hosts.hpp"

#include <exception>
#include <thread>
#include <utility>

#include "verbsim/sim/simulation.hpp"
#include "verbsim/sim/ticker.hpp"

namespace verbsim::sim {

void run_hosts(World* world, std::vector<HostBody> hosts, HostOptions options) {
  if (world != nullptr) {
    Simulation sim(*world);
    std::size_t live = hosts.size();
    bool running = live != 0;
    // The tickers stop with the last host, however it ends.
    struct Done {
      std::size_t& live;
      bool& running;
      ~Done() { running = --live > 0; }
    };
    for (HostBody& h : hosts) {
      sim.spawn(std::move(h.name), [&live, &running, body = std::move(h.body)] {
        Done done{live, running};
        body();
      });
    }
    if (options.tick.count() > 0) spawn_tickers(sim, options.tick, running);
    sim.run();
    return;
  }
  std::vector<std::exception_ptr> errors(hosts.size());
  std::vector<std::thread> threads;
  threads.reserve(hosts.size());
  for (std::size_t i = 0; i < hosts.size(); ++i) {
    threads.emplace_back([&errors, i, body = std::move(hosts[i].body)] {
      try {
        body();
      } catch (...) {
        errors[i] = std::current_exception();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

void pause(World* world, std::chrono::nanoseconds d) {
  if (d.count() <= 0) return;
  if (world != nullptr) {
    sleep_for(*world, d);
  } else {
    std::this_thread::sleep_for(d);
  }
}

}  // namespace verbsim::sim
