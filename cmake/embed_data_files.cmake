# Writes a C++ source holding every <DIR>/*<EXTENSION> as a string, keyed by file stem, so that
# the binary needs no data directory at run time and the data stays plain files anyone can read
# or diff. Run as a script:
#
#   cmake -DOUTPUT=<file.cpp> -DDIR=<data dir> -DEXTENSION=.json -DFUNCTION=<name> [-DORDER=<file>]
#         -P embed_data_files.cmake
#
# The generated source defines `trainfit::detail::<FUNCTION>()`, returning
# {stem, text} pairs. Without ORDER the files come sorted by name. With ORDER (a text file, one
# stem a line, `#` comments) they come in that order, and the build fails when a listed stem has
# no file or a file is not listed: a card added without a place in the list, or a list entry left
# behind, must not build.
cmake_minimum_required(VERSION 3.25)  # script mode starts with no policies; IN_LIST needs CMP0057

foreach(arg OUTPUT DIR EXTENSION FUNCTION)
  if(NOT DEFINED ${arg})
    message(FATAL_ERROR "embed_data_files.cmake: -D${arg}=... is required")
  endif()
endforeach()

file(GLOB paths ${DIR}/*${EXTENSION})
set(stems "")
foreach(path ${paths})
  # NAME_WE stops at the first dot; qwen2.5-7b needs the full stem.
  get_filename_component(fname ${path} NAME)
  string(LENGTH "${fname}" name_length)
  string(LENGTH "${EXTENSION}" ext_length)
  math(EXPR stem_length "${name_length} - ${ext_length}")
  string(SUBSTRING "${fname}" 0 ${stem_length} stem)
  list(APPEND stems "${stem}")
endforeach()
list(SORT stems)

if(DEFINED ORDER AND NOT ORDER STREQUAL "")
  file(STRINGS ${ORDER} lines)
  set(ordered "")
  foreach(line ${lines})
    string(REGEX REPLACE "#.*$" "" line "${line}")
    string(STRIP "${line}" line)
    if(line STREQUAL "")
      continue()
    endif()
    if(NOT line IN_LIST stems)
      message(FATAL_ERROR "${ORDER}: '${line}' has no file ${DIR}/${line}${EXTENSION}")
    endif()
    if(line IN_LIST ordered)
      message(FATAL_ERROR "${ORDER}: '${line}' is listed twice")
    endif()
    list(APPEND ordered "${line}")
  endforeach()
  foreach(stem ${stems})
    if(NOT stem IN_LIST ordered)
      message(FATAL_ERROR "${DIR}/${stem}${EXTENSION} is not listed in ${ORDER}: give it its place there")
    endif()
  endforeach()
  set(stems ${ordered})
endif()

get_filename_component(dir_name ${DIR} NAME)
get_filename_component(parent ${DIR} DIRECTORY)
get_filename_component(parent_name ${parent} NAME)
set(label "${parent_name}/${dir_name}/*${EXTENSION}")
set(delimiter "tfembed")
set(body "// Generated from ${label} by cmake/embed_data_files.cmake. Do not edit.\n")
string(APPEND body "#include <string_view>\n#include <utility>\n#include <vector>\n\n")
string(APPEND body "namespace trainfit::detail {\n")
string(APPEND body "const std::vector<std::pair<std::string_view, std::string_view>>& ${FUNCTION}() {\n")
string(APPEND body "  static const std::vector<std::pair<std::string_view, std::string_view>> files = {\n")
foreach(stem ${stems})
  set(path "${DIR}/${stem}${EXTENSION}")
  file(READ ${path} text)
  # A raw string ends at the first )delimiter"; a file holding one would end it early.
  string(FIND "${text}" ")${delimiter}\"" clash)
  if(NOT clash EQUAL -1)
    message(FATAL_ERROR "${path} contains ')${delimiter}\"', which would end its embedded raw string")
  endif()
  string(APPEND body "    {\"${stem}\", R\"${delimiter}(${text})${delimiter}\"},\n")
endforeach()
string(APPEND body "  };\n  return files;\n}\n}  // namespace trainfit::detail\n")
file(WRITE ${OUTPUT}.tmp "${body}")
file(COPY_FILE ${OUTPUT}.tmp ${OUTPUT} ONLY_IF_DIFFERENT)
