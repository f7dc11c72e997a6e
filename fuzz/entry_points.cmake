# tierflow_fuzz_entry_points: the fuzz entry points (fuzz/entry_points.h) as a
# plain library, shared by the libFuzzer executables (fuzz/CMakeLists.txt)
# and the regression test that replays saved crash inputs
# (tests/fuzz_regressions). Included from both; defined once.
if(NOT TARGET tierflow_fuzz_entry_points)
  add_library(tierflow_fuzz_entry_points STATIC
    ${PROJECT_SOURCE_DIR}/fuzz/temp_dir.cc
    ${PROJECT_SOURCE_DIR}/fuzz/safetensors_fuzz.cc
    ${PROJECT_SOURCE_DIR}/fuzz/config_fuzz.cc
    ${PROJECT_SOURCE_DIR}/fuzz/swap_fuzz.cc
    ${PROJECT_SOURCE_DIR}/fuzz/data_fuzz.cc
    ${PROJECT_SOURCE_DIR}/fuzz/tokenizer_components_fuzz.cc
    ${PROJECT_SOURCE_DIR}/fuzz/instruction_fuzz.cc
  )
  target_link_libraries(tierflow_fuzz_entry_points PUBLIC
    tierflow_io tierflow_model_config tierflow_offload tierflow_data nlohmann_json::nlohmann_json)
  tierflow_layer(fuzz fuzz tierflow_fuzz_entry_points)
  # The training config joins when its library is part of the build.
  if(TARGET tierflow_train_config)
    target_link_libraries(tierflow_fuzz_entry_points PUBLIC tierflow_train_config)
    target_compile_definitions(tierflow_fuzz_entry_points PUBLIC TIERFLOW_FUZZ_HAVE_TRAIN_CONFIG=1)
  endif()
  # So does the checkpoint reader (the checkpoint layer).
  if(TARGET tierflow_checkpoint)
    target_sources(tierflow_fuzz_entry_points PRIVATE ${PROJECT_SOURCE_DIR}/fuzz/checkpoint_fuzz.cc)
    target_link_libraries(tierflow_fuzz_entry_points PUBLIC tierflow_checkpoint)
    target_compile_definitions(tierflow_fuzz_entry_points PUBLIC TIERFLOW_FUZZ_HAVE_CHECKPOINT=1)
  endif()
  # And the tier commands (ls, verify, export on a crafted checkpoint).
  if(TARGET tierflow_tier)
    target_sources(tierflow_fuzz_entry_points PRIVATE ${PROJECT_SOURCE_DIR}/fuzz/tier_fuzz.cc)
    target_link_libraries(tierflow_fuzz_entry_points PUBLIC tierflow_tier)
    target_compile_definitions(tierflow_fuzz_entry_points PUBLIC TIERFLOW_FUZZ_HAVE_TIER=1)
  endif()
endif()
