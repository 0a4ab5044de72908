"""Building blocks for pyagent's streaming tool-call and reasoning parsers (see this distribution's README).

- :mod:`~pyagent_parser_base.source`: readers that suspend until the text they need has arrived;
- :mod:`~pyagent_parser_base.emitter`: where a format reports content, reasoning, calls and errors;
- :mod:`~pyagent_parser_base.machine`: runs a format's program over a whole text or a stream, and the
  streaming methods of a parser built on one;
- :mod:`~pyagent_parser_base.jsonscan`: incremental JSON readers and ``{"name", "arguments"}`` call objects;
- :mod:`~pyagent_parser_base.regions`: a tool format declared as content with call regions in it;
- :mod:`~pyagent_parser_base.named` and :mod:`~pyagent_parser_base.xml`: calls written from a template,
  and XML-ish calls whose values the tool's schema types;
- :mod:`~pyagent_parser_base.harmony`: the messages of OpenAI's harmony format, routed per parser.
"""
