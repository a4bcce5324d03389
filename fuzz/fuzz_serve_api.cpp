// trainfit serve's API (serve::handle) on any request: the first byte picks the method and the
// endpoint, the rest is the body of a POST or the query string of a GET ("a=1&b=&c=x"). Every
// answer must be a status from the API's list with a JSON or page body; nothing may crash.
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "trainfit/serve.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  static const char* const kPaths[] = {"/api/plan", "/api/curves", "/api/advise", "/api/models", "/"};
  trainfit::serve::Request r;
  r.method = (data[0] & 1) != 0 ? "POST" : "GET";
  r.path = kPaths[(data[0] >> 1) % 5];
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  if (r.method == "POST") {
    r.body = std::string(rest);
  } else {
    std::size_t at = 0;
    while (at <= rest.size()) {
      const std::size_t end = std::min(rest.find('&', at), rest.size());
      const std::string_view pair = rest.substr(at, end - at);
      const std::size_t eq = pair.find('=');
      r.query.emplace_back(std::string(pair.substr(0, eq)),
                           eq == std::string_view::npos ? "" : std::string(pair.substr(eq + 1)));
      at = end + 1;
    }
  }
  const trainfit::serve::Response res = trainfit::serve::handle(r);
  if (res.status == 500) std::abort();  // a bug: the API answers every client error with a 4xx
  if (res.status != 200 && res.status != 400 && res.status != 404 && res.status != 405 && res.status != 413)
    std::abort();
  if (res.content_type == "application/json" && !nlohmann::json::accept(res.body)) std::abort();
  return 0;
}
