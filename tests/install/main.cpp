// Opens the simulator through the installed package and prints the first device.
#include <exception>
#include <iostream>

#include <verbsim/verbsim.hpp>

int main() {
  try {
    auto backend = verbsim::open_backend("sim");
    const auto devices = backend->devices();
    if (devices.empty()) {
      std::cerr << "consumer: the sim backend lists no devices\n";
      return 1;
    }
    auto context = backend->open();
    std::cout << "consumer: backend " << backend->name() << ", " << devices.size()
              << " device(s), opened " << context->info().name << "\n";
    verbsim::destroy(context);  // contexts go before their backend
  } catch (const std::exception& e) {
    std::cerr << "consumer: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
