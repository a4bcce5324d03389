// The API of `trainfit serve` as a function from request to response (docs/serve.md). Every answer
// comes from the calls the commands make (make_plan, render_plan, make_advise_request, advise...),
// so the page and the command line cannot disagree. Nothing here reads a file: a model is a
// built-in name or a pasted config.json, a card a catalogue name or a memory size.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string_view>

#include "common/text.hpp"
#include "trainfit/serve.hpp"
#include "trainfit/trace.hpp"
#include "trainfit/trainfit.hpp"

namespace trainfit::serve {
namespace {

using json = nlohmann::json;

class RequestError : public InputError {
 public:
  RequestError(int status, const std::string& message) : InputError(message), status_(status) {}
  int status() const { return status_; }

 private:
  int status_;
};

Response json_response(std::string body) {
  return {200, "application/json", std::move(body)};
}

Response error_response(int status, std::string_view message) {
  // The message may quote the request, cut short in the middle of a UTF-8 sequence: replaced, not
  // thrown (a throw here took the server down; found by fuzz_serve_api).
  return {status, "application/json",
          json{{"error", std::string(message)}}.dump(-1, ' ', false, json::error_handler_t::replace) + "\n"};
}

// The settings a network client may not give: they name files on the server's machine.
constexpr std::string_view kFileSettings[] = {"gpu_spec"};

// One named value of a request: a query parameter's text, or a JSON body's value.
struct Input {
  std::string name;  // as the client wrote it, for messages
  std::string key;   // the name with '-' read as '_'
  bool from_query = true;
  std::string text;  // from_query
  json value;        // from a body
};

std::string snake_case(std::string_view name) {
  std::string key(name);
  std::replace(key.begin(), key.end(), '-', '_');
  return key;
}

std::string text_of(const Input& in) {
  if (in.from_query) return in.text;
  if (!in.value.is_string()) throw RequestError(400, fmt::format("{}: must be a string", in.name));
  return in.value.get<std::string>();
}

bool bool_of(const Input& in) {
  if (!in.from_query) {
    if (!in.value.is_boolean()) throw RequestError(400, fmt::format("{}: must be true or false", in.name));
    return in.value.get<bool>();
  }
  // A flag without a value (`grad-ckpt=`), as on the command line, is on.
  if (in.text.empty() || in.text == "true" || in.text == "1" || in.text == "on") return true;
  if (in.text == "false" || in.text == "0" || in.text == "off") return false;
  throw RequestError(
      400, fmt::format("{}: {} is not on or off (give it empty, true or false)", in.name, detail::quoted(in.text)));
}

double number_of(const Input& in) {
  double v = 0;
  if (!in.from_query) {
    if (!in.value.is_number()) throw RequestError(400, fmt::format("{}: must be a number", in.name));
    v = in.value.get<double>();
  } else {
    const char* begin = in.text.c_str();
    char* end = nullptr;
    v = std::strtod(begin, &end);
    if (in.text.empty() || end != begin + in.text.size())
      throw RequestError(400, fmt::format("{}: {} is not a number", in.name, detail::quoted(in.text)));
  }
  if (!std::isfinite(v)) throw RequestError(400, fmt::format("{}: must be a finite number", in.name));
  return v;
}

std::int64_t integer_of(const Input& in) {
  std::int64_t v = 0;
  if (!in.from_query) {
    if (!in.value.is_number_integer()) throw RequestError(400, fmt::format("{}: must be a whole number", in.name));
    return in.value.get<std::int64_t>();
  }
  const auto [end, ec] = std::from_chars(in.text.data(), in.text.data() + in.text.size(), v);
  if (ec != std::errc() || end != in.text.data() + in.text.size() || in.text.empty())
    throw RequestError(400, fmt::format("{}: {} is not a whole number", in.name, detail::quoted(in.text)));
  return v;
}

// A request's inputs, with what a POST body brought beside them.
struct Inputs {
  std::vector<Input> items;
  std::optional<std::string> config_json;  // a pasted config.json's text
  std::optional<std::string> recipe;       // a pasted training recipe's text (`--recipe`)
};

Inputs read_inputs(const Request& r, const Limits& limits) {
  Inputs out;
  if (r.method == "GET") {
    if (r.query.size() > limits.max_parameters)
      throw RequestError(400, fmt::format("{} parameters: at most {} are read", r.query.size(), limits.max_parameters));
    for (const auto& [name, text] : r.query) {
      if (text.size() > limits.max_value_bytes)
        throw RequestError(
            400, fmt::format("{}: a value of {} bytes (at most {})", name, text.size(), limits.max_value_bytes));
      out.items.push_back({name, snake_case(name), true, text, {}});
    }
    return out;
  }
  if (!r.query.empty()) throw RequestError(400, "a POST takes its setup in the body, not in the query");
  if (r.body.size() > limits.max_body_bytes)
    throw RequestError(413, fmt::format("a body of {} bytes (at most {})", r.body.size(), limits.max_body_bytes));
  if (detail::json_nesting_depth(r.body) > limits.max_json_depth)
    throw RequestError(400, fmt::format("the body nests deeper than {} levels", limits.max_json_depth));
  json body;
  try {
    body = json::parse(r.body);
  } catch (const json::exception& e) {  // a parse error, or a number too large for a double (out_of_range)
    throw RequestError(400, fmt::format("the body is not JSON: {}", e.what()));
  }
  if (!body.is_object()) throw RequestError(400, "the body must be a JSON object: {\"model\": ..., \"seq\": ...}");
  if (body.size() > limits.max_parameters)
    throw RequestError(400, fmt::format("{} keys: at most {} are read", body.size(), limits.max_parameters));
  for (auto& [key, value] : body.items()) {
    if (key == "recipe") {
      if (!value.is_string()) throw RequestError(400, "recipe: must be the recipe file's text (YAML or JSON)");
      out.recipe = value.get<std::string>();
      continue;
    }
    if (key == "config_json") {
      if (value.is_object())
        out.config_json = value.dump();
      else if (value.is_string())
        out.config_json = value.get<std::string>();
      else
        throw RequestError(400, "config_json: must be the config.json's object, or its text");
      continue;
    }
    out.items.push_back({key, snake_case(key), false, {}, value});
  }
  return out;
}

// The setting an input names: its flag without the dashes (a query) or its JSON key (a body);
// `off` says the query named a switch's "no-" form.
const Setting* setting_of(const Input& in, bool& off) {
  off = false;
  const Setting* s = in.from_query ? find_setting_by_flag("--" + in.name) : find_setting(in.name);
  if (s == nullptr && in.from_query) s = find_setting(in.name);  // the JSON key works in a query too
  if (s != nullptr && in.from_query && s->type == SettingType::boolean && in.name.rfind("no-", 0) == 0 &&
      "--" + in.name != s->flag)
    off = true;
  return s;
}

GivenSetting given_setting(const Setting& s, const Input& in, bool off) {
  for (const std::string_view file_key : kFileSettings)
    if (s.key == file_key)
      throw RequestError(400, fmt::format("{}: names a file, which the API never reads; give gpu (a catalogue card) "
                                          "or vram",
                                          in.name));
  if (s.type == SettingType::boolean) {
    const bool on = bool_of(in);
    return {&s, SettingValue(off ? !on : on)};
  }
  if (in.from_query) return {&s, parse_setting_text(s, in.text)};
  try {
    return {&s, check_setting_value(s, setting_value_from_json(in.value))};
  } catch (const json::exception&) {
    throw RequestError(400, fmt::format("{}: not a value this setting takes", in.name));
  }
}

// What a request asks of a plan or a search: the model, the settings, and the options each
// endpoint reads itself (by key).
struct Asked {
  std::optional<ModelSpec> model;  // loaded: a built-in or the pasted config.json
  std::vector<GivenSetting> given;
  std::vector<Input> options;
  std::string gpu_text, method_text;  // advise: "any" or a list may stand here
  std::vector<std::string> recipe_lines;  // a pasted recipe's ignored keys and readings (plan warnings)
};

Asked read_asked(const Inputs& inputs, const std::vector<std::string>& option_keys, bool texts_for_advise) {
  Asked a;
  std::vector<std::string> seen;
  std::string model_name;
  for (const Input& in : inputs.items) {
    bool off = false;
    const Setting* s = setting_of(in, off);
    const std::string key = s != nullptr ? s->key : in.key;
    if (std::find(seen.begin(), seen.end(), key) != seen.end())
      throw RequestError(400, fmt::format("{}: given twice", in.name));
    seen.push_back(key);
    if (s == nullptr) {
      if (std::find(option_keys.begin(), option_keys.end(), in.key) == option_keys.end())
        throw RequestError(400, fmt::format("unknown parameter {} (the settings are `trainfit schema`'s; see "
                                            "docs/serve.md)",
                                            detail::quoted(in.name)));
      a.options.push_back(in);
      continue;
    }
    if (texts_for_advise && (s->key == "gpu" || s->key == "method")) {
      (s->key == "gpu" ? a.gpu_text : a.method_text) = text_of(in);
      continue;
    }
    if (s->key == "model") model_name = text_of(in);
    a.given.push_back(given_setting(*s, in, off));
  }
  if (inputs.recipe) {
    // The recipe's settings under the ones the request names itself, as `--recipe` under flags.
    std::optional<Objective> objective;
    for (const GivenSetting& g : a.given)
      if (g.setting->key == "objective") objective = parse_objective(std::get<std::string>(g.value));
    Recipe recipe = parse_recipe(*inputs.recipe, "the pasted recipe", objective);
    for (GivenSetting& g : recipe.settings) {
      if (std::find(seen.begin(), seen.end(), g.setting->key) != seen.end()) continue;
      if (g.setting->key == "model") model_name = std::get<std::string>(g.value);
      a.given.push_back(std::move(g));
    }
    a.recipe_lines = recipe_warnings(recipe);
  }
  if (inputs.config_json) {
    if (!model_name.empty())
      throw RequestError(400, "give model (a built-in name) or config_json (a pasted config.json), not both");
    a.model = parse_model_config(*inputs.config_json, "config.json");
    a.given.emplace_back(find_setting("model"), SettingValue(std::string("config.json")));
  } else if (model_name.empty()) {
    throw RequestError(400,
                       "name the model: model (a built-in name, /api/models) or config_json (a pasted config.json)");
  } else {
    a.model = load_builtin_model(model_name);
  }
  return a;
}

const Input* option(const Asked& a, std::string_view key) {
  for (const Input& in : a.options)
    if (in.key == key) return &in;
  return nullptr;
}

Plan plan_of(const Asked& a) {
  const TrainingSetup setup = resolve_setup(a.given);
  PlanOptions options;
  if (const Input* in = option(a, "no_suggest")) options.suggest = !bool_of(*in);
  if (const Input* in = option(a, "largest")) options.largest = text_of(*in);
  Plan p = make_plan(*a.model, setup, resolve_card(setup), options);
  for (std::string& line : ignored_settings(a.given, setup)) p.warnings.push_back(std::move(line));
  for (const std::string& line : a.recipe_lines) p.warnings.push_back(line);
  return p;
}

// The format asked for (format=json, the default; table, markdown or html as the commands print
// them, for a client that shows them as they are: the Python package, curl) and its content type.
struct Rendering {
  Format format = Format::json;
  std::string content_type = "application/json";
};

Rendering rendering_of(const Asked& a) {
  Rendering r;
  const Input* in = option(a, "format");
  if (in == nullptr) return r;
  const std::string text = text_of(*in);
  try {
    r.format = parse_report_format(text);
  } catch (const InputError&) {
    throw RequestError(400, fmt::format("format: {} is not one of json, table, markdown, html", detail::quoted(text)));
  }
  if (r.format == Format::table) r.content_type = "text/plain; charset=utf-8";
  if (r.format == Format::markdown) r.content_type = "text/markdown; charset=utf-8";
  if (r.format == Format::html) r.content_type = "text/html; charset=utf-8";
  return r;
}

void check_json_format(const Asked& a) {
  if (rendering_of(a).format != Format::json)
    throw RequestError(400, "format: this endpoint answers in JSON only (format=json)");
}

Response plan_endpoint(const Inputs& inputs, bool curves) {
  const Asked a = read_asked(inputs, {"no_suggest", "largest", "format"}, false);
  if (curves) check_json_format(a);
  const Rendering how = rendering_of(a);
  const Plan p = plan_of(a);
  if (curves) return json_response(plan_curves(p).dump(2) + "\n");
  return {200, how.content_type, render_plan(p, how.format)};
}

Response advise_endpoint(const Inputs& inputs) {
  const Asked a = read_asked(inputs,
                             {"goal", "free", "fix", "gpus_max", "top", "tokens_per_step", "tokens", "epochs",
                              "dataset_tokens", "verbose", "format"},
                             true);
  const Rendering how = rendering_of(a);
  AdviseInputs in;
  in.given = a.given;
  in.gpu_text = a.gpu_text;
  in.method_text = a.method_text;
  bool verbose = false;
  for (const Input& o : a.options) {
    if (o.key == "goal")
      in.goal = text_of(o);
    else if (o.key == "free")
      in.free = text_of(o);
    else if (o.key == "fix")
      in.fix = text_of(o);
    else if (o.key == "gpus_max")
      in.gpus_max = integer_of(o);
    else if (o.key == "top")
      in.top = integer_of(o);
    else if (o.key == "tokens_per_step")
      in.tokens_per_step = integer_of(o);
    else if (o.key == "tokens")
      in.tokens = number_of(o);
    else if (o.key == "epochs")
      in.epochs = number_of(o);
    else if (o.key == "dataset_tokens")
      in.dataset_tokens = number_of(o);
    else if (o.key == "verbose")
      verbose = bool_of(o);  // the JSON is the same with or without it, as on the command line
  }
  const AdviseRequest r = make_advise_request(in, builtin_prices());
  const Advice advice = advise(*a.model, r);
  if (advice.results.empty()) throw RequestError(400, nothing_fits_message(advice));
  return {200, how.content_type, render_advice(advice, r, how.format, verbose)};
}

// POST /api/snapshot: the body is the snapshot file itself (the pickle torch.cuda.memory._dump_snapshot
// writes, or its JSON rendering); the query may hold a setup, whose plan is set beside it.
Response snapshot_endpoint(const Request& r, const Limits& limits) {
  if (r.body.empty())
    throw RequestError(400,
                       "POST the snapshot file as the body: the pickle torch.cuda.memory._dump_snapshot writes, "
                       "or its JSON rendering");
  if (r.body.size() > limits.max_snapshot_bytes)
    throw RequestError(413, fmt::format("a snapshot of {} bytes (at most {})", r.body.size(), limits.max_snapshot_bytes));
  // A gzipped file is inflated by the page (DecompressionStream) before it is posted: inflating
  // here would let a small body take the server's memory.
  if (r.body.size() >= 2 && static_cast<unsigned char>(r.body[0]) == 0x1f && static_cast<unsigned char>(r.body[1]) == 0x8b)
    throw RequestError(400, "the snapshot is gzipped: post it inflated (gunzip it first; the page does)");
  for (const auto& [key, value] : r.query)
    if (key == "format" && value != "json") throw RequestError(400, "format: the API answers in JSON only (format=json)");
  const trace::SnapshotReport report = trace::analyse_snapshot_text(r.body, "the posted snapshot");
  std::optional<trace::PlanComparison> comparison;
  // A query of settings (more than `format`) is a setup to plan beside the snapshot.
  const bool setup_given = std::any_of(r.query.begin(), r.query.end(), [](const auto& kv) { return kv.first != "format"; });
  if (setup_given) {
    Request setup = r;  // the query read as a GET's
    setup.method = "GET";
    setup.body.clear();
    const Asked a = read_asked(read_inputs(setup, limits), {"format"}, false);
    check_json_format(a);
    comparison = trace::compare_with_plan(trace::RankTrace{}, &report, plan_of(a));
  }
  return json_response(trace::render_snapshot(report, comparison ? &*comparison : nullptr, Format::json));
}

// The page's starting setup when its address names none: the seed's question, a 7B model on a
// 16 GB card. The page's script reads it from the page (data-setup), so it lives here only.
constexpr std::string_view kStartingSetup = "model=qwen2.5-7b&gpu=rtx-5070-ti";

// The page, with the summary of the setup its address names (its share link, or the form the page
// shows without scripts) drawn here: it reads without scripts; its script draws the rest over it.
Response index_page(const Request& r, const Limits& limits) {
  Request setup = r;
  setup.query.clear();
  for (const auto& [name, value] : r.query) {
    // The no-script form sends its empty fields; a switch's "name=" is a value.
    const Setting* s = find_setting_by_flag("--" + name);
    if (value.empty() && (s == nullptr || s->type != SettingType::boolean)) continue;
    setup.query.emplace_back(name, value);
  }
  if (setup.query.empty())
    for (std::string_view rest = kStartingSetup; !rest.empty();) {
      const std::string_view pair = rest.substr(0, rest.find('&'));
      rest.remove_prefix(std::min(rest.size(), pair.size() + 1));
      const auto eq = pair.find('=');
      setup.query.emplace_back(std::string(pair.substr(0, eq)), std::string(pair.substr(eq + 1)));
    }
  std::string summary;
  try {
    summary = plan_summary_html(plan_to_json(plan_of(read_asked(read_inputs(setup, limits), {}, false))));
  } catch (const std::exception& e) {  // the summary says why; the page's script says it again
    summary = "<p class=\"error\">" + detail::html_escaped(e.what()) + "</p>";
  }
  std::string page(web_asset("index.html"));
  const std::string slot = "<div id=\"result\"></div>";
  const auto at = page.find(slot);
  if (at != std::string::npos)
    page.replace(at, slot.size(),
                 fmt::format("<div id=\"result\" data-setup=\"{}\">{}</div>", detail::html_escaped(kStartingSetup), summary));
  return {200, "text/html; charset=utf-8", page};
}

std::string content_type_of(std::string_view name) {
  auto ends = [&](std::string_view ext) {
    return name.size() >= ext.size() && name.compare(name.size() - ext.size(), ext.size(), ext) == 0;
  };
  if (ends(".html")) return "text/html; charset=utf-8";
  if (ends(".js")) return "text/javascript; charset=utf-8";
  if (ends(".css")) return "text/css; charset=utf-8";
  if (ends(".svg")) return "image/svg+xml";
  return "text/plain; charset=utf-8";
}

Response route(const Request& r, const Limits& limits) {
  const bool get = r.method == "GET", post = r.method == "POST";
  if (r.path.rfind("/api/", 0) != 0) {
    if (!get) return error_response(405, fmt::format("{} {}: the page's files are read with GET", r.method, r.path));
    const std::string name = r.path == "/" ? "index.html" : r.path.substr(1);
    if (name == "index.html") return index_page(r, limits);
    if (name == "words.js") return {200, content_type_of(name), web_words_script()};
    const std::string_view text = web_asset(name);
    if (text.empty()) return error_response(404, fmt::format("no page {}", detail::printable(r.path)));
    return {200, content_type_of(name), std::string(text)};
  }
  const std::string endpoint = r.path.substr(5);
  const bool takes_post = endpoint == "plan" || endpoint == "curves" || endpoint == "advise";
  if (endpoint == "snapshot") {
    if (!post) return error_response(405, fmt::format("{} {}: POST the snapshot file", r.method, r.path));
    return snapshot_endpoint(r, limits);
  }
  if (!get && !(post && takes_post))
    return error_response(405, fmt::format("{} {}: not a method this endpoint answers", r.method, r.path));
  if (endpoint == "plan" || endpoint == "curves") return plan_endpoint(read_inputs(r, limits), endpoint == "curves");
  if (endpoint == "advise") return advise_endpoint(read_inputs(r, limits));
  if (endpoint == "models" || endpoint == "gpus" || endpoint == "schema") {
    if (!r.query.empty()) throw RequestError(400, fmt::format("{} takes no parameters", r.path));
    if (endpoint == "models") return json_response(render_model_catalog(Format::json));
    if (endpoint == "gpus") return json_response(render_gpu_catalog(gpu_catalog(), Format::json));
    return json_response(setup_schema().dump(2) + "\n");  // what `trainfit schema` prints
  }
  return error_response(404, fmt::format("no endpoint {} (see docs/serve.md)", detail::printable(r.path)));
}

}  // namespace

Response handle(const Request& request, const Limits& limits) {
  try {
    return route(request, limits);
  } catch (const RequestError& e) {
    return error_response(e.status(), e.what());
  } catch (const InputError& e) {  // SettingError too: it names the setting by its JSON key
    return error_response(400, e.what());
  } catch (const SystemError& e) {
    return error_response(500, e.what());
  } catch (const std::exception& e) {
    return error_response(500, fmt::format("internal error: {}", e.what()));
  }
}

}  // namespace trainfit::serve
