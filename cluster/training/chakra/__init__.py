"""MLCommons Chakra execution traces (one protobuf file per rank), read into typed values
(``docs/chakra.md``): the files of a trace (:mod:`.et_files`), their framing
(:mod:`.et_framing`), a node decoded (:mod:`.et_decode`), the checks within and across
ranks (:mod:`.et_checks`), the reader that ties them (:mod:`.et_reader`) and what
``ipupod chakra show`` prints of a trace (:mod:`.et_summary`)."""
