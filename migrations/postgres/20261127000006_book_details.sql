-- What a books API knows of a book the catalogue lacks (year, subjects, link, provider),
-- as JSON, kept with the reading record.
ALTER TABLE reading_records ADD COLUMN details TEXT;
